"""Time of one fused-attention kernel call on one GPU: the catalog's in-step attention fraction at the kernel's
shape factor (cost.attention), or a measured table's rate (cost.table_attention), bounded below by the softmax's
exponentials; a layer block standing for causal-window layers is priced as its windowed and full layers
(cost.attention.window_tile_factor). cost.compute prices every other op and re-exports these.
"""

from __future__ import annotations

from paraplan.cost import table_attention
from paraplan.cost.attention import attention_shape_scale, effective_kernel
from paraplan.cost.flops import softmax_exponentials
from paraplan.graph.mla import window_fraction
from paraplan.graph.ops import Op
from paraplan.specs.system import AcceleratorSpec


def attention_efficiency(acc: AcceleratorSpec, call: tuple | None, window: int | None = None):
    """Catalog attention fraction (its kernel at the reference shape) × kernel shape factor ratio
    (cost.attention: FA3 paper Fig. 5 curves by sequence, head dim and causal mask) × a causal
    ``window``'s tile factor (cost.attention.window_tile_factor), as attention_shape_scale takes them."""
    eff = acc.efficiency.attention
    if call is None:
        return eff
    q_tokens, kv_tokens, head_dim, causal = call
    kernel = effective_kernel(acc.efficiency.attention_kernel, acc.architecture)
    seq = min(q_tokens, kv_tokens)
    return eff * attention_shape_scale(kernel, seq, head_dim, causal, window)


def attention_time_s(
    flops: float,
    causal_fraction: float,
    acc: AcceleratorSpec,
    dtype: str,
    call: tuple[int, int, int, bool] | None = None,
    direction: str = "fwd",
    exponentials: float = 0.0,
    window: int | None = None,
) -> float:
    """Fused attention: max(flops · causal_fraction / (peak · attention_efficiency), exponentials /
    softmax exponent rate) + overhead, at the dtype's attention peak (AcceleratorSpec.peak_attention_flops:
    bf16 in fp8 and FP4 recipes, 3xTF32 in fp32 / tf32), or the measured table's time for the system's
    kernel and ``direction`` (fwd / bwd) at this call (cost.table_attention: bwd rows timed on leaf q, k, v
    less their gradients' accumulation at the HBM rate, cost.leaf_grads). The softmax's exponentials run
    on the special function units beside the tensor cores; FlashAttention-3/4 overlap one tile's softmax
    with another's matrix products (Shah et al. 2024, FlashAttention-3, §3.1 ping-pong scheduling), so the
    slower of the two bounds the kernel (cost.flops.softmax_exponentials; AcceleratorSpec.softmax_exp_rate)."""
    if flops <= 0:
        return 0.0
    rate = acc.exp_rate()  # at the sustained clock under a power cap (specs.power)
    exp_s = exponentials / rate if rate else 0.0
    if acc.kernel_tables and call is not None:
        kernel = effective_kernel(acc.efficiency.attention_kernel, acc.architecture)
        work, l2 = flops * causal_fraction, acc.l2_cache
        measured = table_attention.attention_time_s(
            acc.kernel_tables, l2, kernel, work, call, direction, dtype, acc.hbm_rate(), window
        )
        if measured is not None:
            measured /= acc.clock_fraction()  # timed at the rated power (specs.power)
            return max(measured, exp_s + acc.efficiency.kernel_overhead_s)
    peak = acc.peak_attention_flops(dtype)
    matrix_s = flops * causal_fraction / (peak * attention_efficiency(acc, call, window))
    return max(matrix_s, exp_s) + acc.efficiency.kernel_overhead_s


def attention_op_s(op: Op, acc: AcceleratorSpec, dtype: str) -> tuple[float, float]:
    """(forward, backward) attention_time_s of a fused-attention op with its softmax exponentials; a block
    for causal-window layers (Op.attention_window: w, windowed share p, a windowed layer's score share) costs
    p × its windowed layers' time (cost.attention.window_tile_factor) + (1 − p) × its full layers', whose
    score share is a causal call's over the call's k keys, (1 + 1/k)/2 (graph.mla.window_fraction: k = s/c,
    the ring chunk, so (1 + c/s)/2)."""
    call, parts = op.attention_call, [(1.0, op.causal_fraction, None)]
    if op.attention_window is not None and call is not None:
        window, share, window_cf = op.attention_window
        parts = [(share, window_cf, window), (1.0 - share, window_fraction(None, call[1], 1), None)]
    times = [0.0, 0.0]
    for share, cf, window in parts:
        exps = softmax_exponentials(op.fwd_flops, cf, call[2]) if call else 0.0
        for i, (flops, way) in enumerate(((op.fwd_flops, "fwd"), (op.bwd_flops, "bwd"))):
            times[i] += share * attention_time_s(flops, cf, acc, dtype, call, way, exps, window)
    return times[0], times[1]
