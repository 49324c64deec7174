"""Op graphs of the 2D tensor-parallel layouts (specs/tp_layout.py), per GPU and micro-batch.

**2d (SUMMA).** On an r × c grid (r = tp_rows, c = tp/r; the NERSC model's m2 × m1, Subramanian et
al. 2024, arXiv:2410.00273, its ``LinearSumma``) GPU (i, j) holds the activation block X(i, j) of
T/r tokens × e/c features (T = b·s/cp the micro-batch's tokens on one tensor-parallel grid) and the
weight block W(i, j) of e/r input × f/c output features of every linear e → f. Y = X·W is computed
in nb panels of the shared dimension e (SUMMA: van de Geijn & Watts 1997, §2-3): per panel, the
owners broadcast a T/r × e/nb activation panel along each grid row (c members) and an e/nb × f/c
weight panel along each grid column (r members), and every GPU adds the panel product to its
T/r × f/c output block. Over the nb panels one GPU receives its whole row block of X, (T/r)·e
elements, and its whole column block of W, e·(f/c). Backward (the same paper; NERSC
``LinearSumma`` docstring): dX = dY·Wᵀ broadcasts W panels along columns and reduces the partial
T/r × e/nb products along rows; dW = Xᵀ·dY broadcasts X panels along rows and reduces the partial
e/nb × f/c products along columns: per GPU e·f/c + (T/r)·e broadcast and (T/r)·e + e·f/c reduced.

Attention under 2d: heads are split over the c columns (whole heads, as in 1D) and tokens over the
r rows; the K/V of a column's T tokens are all-gathered over the column (r members) before the
fused kernel and their gradients reduce-scattered after it — the all-gather pattern of the NERSC
model's context-parallel attention (``FusedLASeqp``), chosen here over its SUMMA logits/attend
(``LogitsSumma``/``AttendSumma``, which split the head dimension and cannot run a fused kernel).
The attention ops are therefore those of 1D TP with tp = c and cp·r sequence chunks.

Norms work on T/r × h/c blocks and all-reduce their per-token statistics along the row (NERSC
``LayerNorm2D``): 2 values per token for LayerNorm (mean, variance), 1 for RMSNorm, forward and
backward. Element-wise ops, activations and weights are split over all r·c GPUs.

**2d-seq.** The 1D layer on s/cp tokens with the context-parallel exchange as the NERSC model's
``FusedLASeqp``: K and V of the whole sequence all-gathered over cp in forward, gathered again and
their gradients reduce-scattered in backward (no ring); nothing hides them (the kernel needs them).
"""

from __future__ import annotations

from functools import lru_cache

from paraplan.graph.cp_ring import cp_kv_ring
from paraplan.graph.ops import Collective, LayerGraph, Op
from paraplan.graph.transformer import (
    layer_param_parts,
    FLOPS_PER_ELEMENT,
    LayerShape,
    _memory,
    _norm_flops,
    attention_ops,
    query_key_ops,
)
from paraplan.graph.tp_collectives import gathered_kv_bytes, kv_gather_collectives
from paraplan.specs.model import ModelSpec


def norm_statistics(model: ModelSpec) -> int:
    """Per-token statistics a norm reduces over the hidden width: 2 for LayerNorm (mean, variance;
    Ba et al. 2016, Eq. 3-4), 1 for RMSNorm (mean square; Zhang & Sennrich 2019, Eq. 4)."""
    return 2 if model.norm == "layernorm" else 1


def summa_gemm(
    name: str, tokens: float, e: float, f: float, rows: int, cols: int, panels: int
) -> Op:
    """One GPU's share of Y = X·W on the grid: 2·(T/r)·(f/c)·e FLOPs forward, the panel GEMMs
    (T/r) × (f/c) × (e/nb) accumulating into one output block (their shape sets the efficiency);
    backward dgrad + wgrad = 2× forward (Narayanan et al. 2021, §5.1)."""
    m, n = tokens / rows, f / cols
    flops = 2.0 * m * n * e
    return Op(
        name,
        "gemm",
        flops,
        0.0,
        2.0 * flops,
        0.0,
        gemm_shape=(1, int(m), int(n), max(1, int(e // panels))),
    )


def summa_collectives(
    name: str, tokens: float, e: float, f: float, rows: int, cols: int, panels: int, ab: int
) -> list[Collective]:
    """SUMMA traffic of one linear e → f per GPU and micro-batch, one call per panel (bytes per call):
    forward broadcasts (T/r)·e/nb activation elements along the row and e/nb·f/c weight elements along
    the column; backward broadcasts both again and reduces the two partial products (dX along the
    row, dW along the column) — van de Geijn & Watts 1997; NERSC model ``LinearSumma``. ``ab`` bytes
    per element (weights and their partial gradients in the same half precision as activations)."""
    x_panel = float(ab * tokens / rows * e / panels)
    w_panel = float(ab * e * f / cols / panels)
    return [
        Collective(
            f"{name}_x_broadcast",
            "tp_row",
            "broadcast",
            x_panel,
            panels,
            panels,
            overlaps_with="panels",
        ),
        Collective(
            f"{name}_w_broadcast",
            "tp_col",
            "broadcast",
            w_panel,
            panels,
            panels,
            overlaps_with="panels",
        ),
        Collective(
            f"{name}_dx_reduce", "tp_row", "reduce", x_panel, 0, panels, overlaps_with="panels"
        ),
        Collective(
            f"{name}_dw_reduce", "tp_col", "reduce", w_panel, 0, panels, overlaps_with="panels"
        ),
    ]


def summa_weight_params(model: ModelSpec, rows: int, cols: int) -> float:
    """Parameters of one decoder layer on one grid GPU: every matrix split over all r·c GPUs (block
    e/r × f/c), column biases over the c columns, norm gains/biases and row biases over the c columns
    (replicated over the rows, as the activations' feature blocks are)."""
    matrices, split_bias, replicated_bias, norm_params = layer_param_parts(model)
    return matrices / (rows * cols) + (split_bias + replicated_bias + norm_params) / cols


def attention_shape_2d(shape: LayerShape) -> LayerShape:
    """The 1D shape whose attention ops are the grid's: heads over the c columns (tp = c), the
    sequence in cp·r chunks (the rows' token shards, K/V all-gathered over each column: the 2d-seq pattern, so no
    ring's partial-output merges, graph.cp_ring)."""
    return shape._replace(
        tp=shape.tp // shape.tp_rows, cp=shape.cp * shape.tp_rows, tp_layout="2d-seq"
    )


@lru_cache(maxsize=4096)
def decoder_layer_2d(model: ModelSpec, shape: LayerShape) -> LayerGraph:
    """All ops of one decoder layer for one micro-batch on one GPU of the r × c SUMMA grid (module docstring)."""
    rows, cols, nb = shape.tp_rows, shape.tp // shape.tp_rows, shape.summa_panels
    grid = rows * cols
    h, f, ab = model.hidden, model.ffn_hidden, shape.act_bytes
    tokens = shape.local_tokens  # T = b·s/cp on the grid
    block = tokens * h / grid  # elements of one T/r × h/c activation block
    mask = 1.0 if model.has_dropout else 0.0
    qkv = model.q_width + 2 * model.kv_width
    linears = (
        ("qkv_projection", h, qkv),
        ("attention_projection", model.q_width, h),
        ("mlp_in_projection", h, model.mlp_input_projections * f),
        ("mlp_out_projection", f, h),
    )
    gemms = {name: summa_gemm(name, tokens, e, out, rows, cols, nb) for name, e, out in linears}
    ops: list[Op] = [
        _memory("input_norm", 2 * ab * block, _norm_flops(model, block)),
        gemms["qkv_projection"],
    ]
    ops += query_key_ops(model, tokens * (model.q_width + model.kv_width) / grid, ab, tokens)
    ops += attention_ops(model, attention_shape_2d(shape))
    ops += [
        gemms["attention_projection"],
        _memory(
            "attention_residual", (3 * ab + mask) * block, FLOPS_PER_ELEMENT["residual"] * block
        ),
        _memory("post_attention_norm", 2 * ab * block, _norm_flops(model, block)),
        gemms["mlp_in_projection"],
        _memory(
            "mlp_activation",
            ab * tokens * f / grid * (3 if model.mlp == "swiglu" else 2),
            FLOPS_PER_ELEMENT[model.mlp] * tokens * f / grid,
        ),
        gemms["mlp_out_projection"],
        _memory("mlp_residual", (3 * ab + mask) * block, FLOPS_PER_ELEMENT["residual"] * block),
    ]
    if (
        shape.dtype == "fp8"
    ):  # casts of every GEMM input / output gradient: the 1D count over the whole grid
        fwd_elems = tokens * (h + model.q_width + h + f) / grid
        bwd_elems = tokens * (qkv + h + model.mlp_input_projections * f + h) / grid
        ops.append(Op("fp8_casts", "memory", 0.0, 3.0 * fwd_elems, 0.0, 3.0 * bwd_elems))
    collectives: list[Collective] = []
    for name, e, out in linears:
        collectives += summa_collectives(name, tokens, e, out, rows, cols, nb, ab)
    stats = float(
        norm_statistics(model) * 4 * tokens / rows
    )  # fp32 per-token statistics of one norm
    collectives.append(
        Collective("norm_statistics_all_reduce", "tp_row", "all_reduce", stats, 2, 2)
    )
    kv = float(gathered_kv_bytes(model, shape))  # the column's K and V of all T tokens
    collectives += kv_gather_collectives("tp_col", kv, rows)
    if shape.cp > 1:  # the grid column's K and V, passed around the cp ring
        collectives.append(cp_kv_ring(model, shape, tokens, split=cols))
    return LayerGraph(
        "decoder_layer", tuple(ops), tuple(collectives), summa_weight_params(model, rows, cols)
    )
