"""How much of its kernel speedup an fp8 step keeps: the NeMo 24.09 bf16 / fp8 twins (docs/model.md §6).

The dgxc-benchmarking runs of validate/cases/nemo-llama31-h100.json pair every fp8 run with a bf16 run of
the same plan. For each pair this prints, from component data and the model's own terms (no step time is
fitted here):

- kernel: the measured H100 table's bf16 / fp8 time ratio (catalog/kernels/h100-sxm5-80gb, bf16
  ``torch.matmul`` against ``torch._scaled_mm``, bursts of 10-25 ms per shape) summed over the case's layer
  GEMMs as they run: fprop (t, out, in), dgrad (t, in, out), wgrad (out, in, t);
- in-step: the same ratio implied by the two measured steps, when every term but the layer GEMMs (attention,
  norms, fp8 casts, TP / CP / DP / PP time, bubble, the LM head priced in bf16 as these stacks run it) is
  the model's, scaled by the bf16 twin's measured / predicted ratio;
- kept: in-step / kernel, the share of the kernel speedup the fp8 step keeps;
- main-grad RMW: the wgrad GEMMs' read-modify-write of the bf16 main_grad buffer (Transformer Engine v1.10
  linear.py: ``fp8_gemm(..., accumulate=..., out=weight.main_grad)``; the runs' grad_sync_dtype bf16), 4 B per
  weight element and micro-batch at the table's copy rate, which the table's rows (bf16 output, no
  accumulate) do not move: the share of the gap it would close were it fully exposed;
- cap: the fp8 GEMM cap (efficiency.gemm_fp8) at which the model's layer-GEMM speedup equals the kernel one
  and the in-step one (bisection), beside the shipped cap's speedup;
- TP vs fp8: the model's TP collective per call against the table's fp8 times of the attention-block GEMMs
  it overlaps (qkv, projection: fprop, dgrad, wgrad), where TP comm overlap runs.

Run: python benchmarks/fp8_twin_gap.py
"""

from __future__ import annotations

from pathlib import Path

from paraplan.cost import kernel_tables as kt
from paraplan.step.estimate import estimate
from paraplan.validate.case_files import load_cases

CASES = Path(__file__).resolve().parents[1] / "src/paraplan/validate/cases/nemo-llama31-h100.json"
TABLE = "h100-sxm5-80gb"
COPY_BYTES_PER_S = (
    3.0e12  # the table's device-to-device copies, read + write (shared reference README)
)
MAIN_GRAD_RMW_BYTES = 4.0  # read + write of a bf16 main_grad element


def layer_gemms(est) -> list[tuple[str, int, int, int]]:
    """(name, tokens, out, in) of the decoder layer's GEMMs on one GPU."""
    return [
        (o.name, o.gemm_shape[1], o.gemm_shape[2], o.gemm_shape[3])
        for o in est.ops
        if o.kind == "gemm" and o.block == "decoder_layer"
    ]


def layers_per_gpu(est) -> int:
    """Decoder layers one GPU runs per micro-batch (the busiest stage's)."""
    return max(o.count_per_gpu for o in est.ops if o.block == "decoder_layer")


def table_time_s(shape: tuple[int, int, int], dtype: str) -> float:
    return kt.gemm_time_s(TABLE, None, 1, *shape, dtype)


def kernel_speedup(gemms) -> float:
    """bf16 / fp8 table time over fprop, dgrad and wgrad of every layer GEMM."""
    shapes = [s for _, t, o, i in gemms for s in ((t, o, i), (t, i, o), (o, i, t))]
    return sum(table_time_s(s, "bf16") for s in shapes) / sum(
        table_time_s(s, "fp8") for s in shapes
    )


def parts(case):
    """Predicted step, layer-GEMM seconds and LM-head seconds per step, the estimate, micro-batches."""
    est = estimate(case.model, case.system, case.plan, with_ops=True)
    p = case.plan
    micro = p.global_batch // (p.gpus // (p.tp * p.pp * p.cp) * p.micro_batch)

    def total(keep) -> float:
        return micro * sum(
            (o.fwd_time_s + o.bwd_time_s) * o.count_per_gpu for o in est.ops if keep(o)
        )

    layer = total(lambda o: o.kind == "gemm" and o.block == "decoder_layer")
    return est.step_time_s, layer, total(lambda o: o.name == "lm_head"), est, micro


def with_fp8_cap(system, cap: float):
    acc = system.accelerator
    eff = acc.efficiency.model_copy(update={"gemm_fp8": cap})
    return system.model_copy(update={"accelerator": acc.model_copy(update={"efficiency": eff})})


def model_speedup(bf16, fp8, cap: float | None = None) -> float:
    """The model's bf16 / fp8 layer-GEMM time of the pair, at the shipped or a given fp8 cap."""
    system = fp8.system if cap is None else with_fp8_cap(fp8.system, cap)

    def layer(case, sysm) -> float:
        est = estimate(case.model, sysm, case.plan, with_ops=True)
        return sum(
            (o.fwd_time_s + o.bwd_time_s) * o.count_per_gpu
            for o in est.ops
            if o.kind == "gemm" and o.block == "decoder_layer"
        )

    return layer(bf16, bf16.system) / layer(fp8, system)


def cap_for(bf16, fp8, target: float) -> float:
    """The fp8 cap at which the model's layer-GEMM speedup is ``target`` (bisection on [0.3, 1])."""
    low, high = 0.3, 1.0
    for _ in range(30):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if model_speedup(bf16, fp8, mid) < target else (low, mid)
    return 0.5 * (low + high)


def tp_line(est, gemms) -> str:
    calls = [c.time_per_call_s for c in est.comms if c.name == "tp_all_gather"]
    if not calls:
        return "no TP collectives"
    attn = [
        (t, o, i) for name, t, o, i in gemms if name in ("qkv_projection", "attention_projection")
    ]
    fp8 = [table_time_s(s, "fp8") for t, o, i in attn for s in ((t, o, i), (t, i, o), (o, i, t))]
    return f"TP collective {calls[0] * 1e3:.3f} ms; attention-block fp8 GEMMs " + ", ".join(
        f"{x * 1e3:.3f}" for x in fp8
    )


def main() -> None:
    cases = {c.name: c for c in load_cases([CASES])}
    for name, bf16 in cases.items():
        if "-bf16-" not in name:
            continue
        fp8 = cases[name.replace("-bf16-", "-fp8-")]
        step_b, layer_b, head_b, est, micro = parts(bf16)
        step_f, layer_f, head_f, _, _ = parts(fp8)
        scale = bf16.measured["step_time_s"] / step_b
        rest_f = (step_f - layer_f + head_b - head_f) * scale  # the LM head in bf16
        implied = fp8.measured["step_time_s"] - rest_f
        gemms = layer_gemms(est)
        ratio = kernel_speedup(gemms)
        in_step = layer_b * scale / implied
        weights = sum(o * i for _, _, o, i in gemms)
        rmw = MAIN_GRAD_RMW_BYTES * weights * layers_per_gpu(est) / COPY_BYTES_PER_S * micro
        at_kernel = layer_b * scale / ratio
        closed = rmw * (1 - 1 / ratio) / (implied - at_kernel)
        print(
            f"{name.replace('-bf16', '')}: bf16 error {100 * (step_b / bf16.measured['step_time_s'] - 1):+.2f} %, "
            f"kernel {ratio:.3f}, in-step {in_step:.3f}, kept {in_step / ratio:.3f}, "
            f"model {model_speedup(bf16, fp8):.3f} at the shipped cap; cap for kernel "
            f"{cap_for(bf16, fp8, ratio):.3f}, for in-step {cap_for(bf16, fp8, in_step):.3f}; "
            f"main-grad RMW {rmw:.2f} s (closes {100 * closed:.0f} % if exposed); {tp_line(est, gemms)}"
        )


if __name__ == "__main__":
    main()
