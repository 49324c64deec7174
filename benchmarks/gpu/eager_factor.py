"""Eager element-wise traffic factor of a PyTorch stack, from component measurements (not step times).

    python benchmarks/gpu/eager_factor.py [KERNELS_CSV] [MODEL] [TOKENS]

For each element-wise op of MODEL's decoder layers and LM head (paraplan's op graph, bf16, TOKENS tokens
per micro-batch), the measured eager kernel of kernels.csv at the same token count and width is compared
with the op's modelled time (its forward + backward HBM bytes at the catalog rate, efficiency.hbm x HBM
bandwidth of dgx-h100-80gb): ratio = measured / modelled. The factor is the mean ratio weighted by each
op's modelled time over the whole model (layers x count + head): what the catalog's fused-kernel rate
must be divided by so that the eager stack's element-wise time is reproduced. Kernels without a row
(embedding lookup, position add) count with ratio 1. Default: the H100 SXM tables of 2026-11-27.
"""

from __future__ import annotations

import csv
import math
import sys

from paraplan.catalog import load_model, load_system
from paraplan.graph.transformer import LayerShape, decoder_layer_1d, lm_head_block

# op of the graph -> (kernels.csv op, forward only measured: the backward is taken at the same ratio)
FAMILY = {
    "input_norm": "{norm}_fwd_bwd",
    "post_attention_norm": "{norm}_fwd_bwd",
    "final_norm": "{norm}_fwd_bwd",
    "mlp_activation": "{act}",
    "attention_residual": "add",
    "mlp_residual": "add",
    "cross_entropy": "cross_entropy_fp32_fwd_bwd",
}
ACT = {"gelu": "gelu_fwd", "swiglu": "swiglu_fwd_bwd"}


def measured_ratios(path: str, rate: float) -> dict[tuple[str, int], float]:
    """(kernels.csv op, width) -> measured time / modelled time at the graph's byte count per element,
    the geometric mean over the table's token counts (4096 and 16384 rows)."""
    model_bytes = {"fwd_bwd": 12.0, "gelu_fwd": 4.0, "add": 6.0, "swiglu_fwd_bwd": 18.0}
    logs: dict[tuple[str, int], list[float]] = {}
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        if "x" not in row["shape"]:
            continue
        t, w = (int(x) for x in row["shape"].split("x"))
        op = row["op"]
        per = (
            20.0
            if op == "cross_entropy_fp32_fwd_bwd"
            else model_bytes.get(op)
            or (model_bytes["fwd_bwd"] if op.endswith("norm_fwd_bwd") else None)
        )
        if per:
            logs.setdefault((op, w), []).append(
                math.log(float(row["time_us"]) * 1e-6 * rate / (per * t * w))
            )
    return {key: math.exp(sum(v) / len(v)) for key, v in logs.items()}


def nearest(ratios: dict, op: str, width: float) -> float:
    widths = [w for o, w in ratios if o == op]
    if not widths:
        return 1.0
    return ratios[(op, min(widths, key=lambda w: abs(w - width)))]


def main(path: str, model_name: str = "gpt3-1.3b", tokens: int = 16384) -> float:
    acc = load_system("dgx-h100-80gb").accelerator
    rate = acc.hbm_bandwidth * acc.efficiency.hbm
    model = load_model(model_name)
    shape = LayerShape(1, 1, 1, tokens, False, "flash", "bf16")
    ratios = measured_ratios(path, rate)
    width = {"mlp_activation": model.ffn_hidden, "cross_entropy": model.vocab}
    modelled = weighted = 0.0
    blocks = (
        (decoder_layer_1d(model, shape), model.layers),
        (lm_head_block(model, shape, True), 1),
    )
    for graph, count in blocks:
        for op in graph.ops:
            if op.kind != "memory":
                continue
            seconds = count * (op.fwd_bytes + op.bwd_bytes) / rate
            family = FAMILY.get(op.name, "").format(norm=model.norm, act=ACT[model.mlp])
            r = nearest(ratios, family, width.get(op.name, model.hidden)) if family else 1.0
            print(
                f"{op.name:22s} {family or '-':28s} modelled {seconds * 1e3:8.2f} ms  ratio {r:.2f}"
            )
            modelled += seconds
            weighted += seconds * r
    factor = weighted / modelled
    print(f"{model_name}, {tokens} tokens: eager traffic factor {factor:.2f}")
    return factor


if __name__ == "__main__":
    args = sys.argv[1:]
    main(
        args[0] if args else "../shared/reference/measured/h100-sxm5-80gb/kernels.csv",
        *(args[1:2] or ["gpt3-1.3b"]),
        *([int(args[2])] if len(args) > 2 else []),
    )
