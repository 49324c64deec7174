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
from paraplan.specs.system import LOW_PRECISION, AcceleratorSpec


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


def fp8_backward_window(acc: AcceleratorSpec, dtype: str, window: int | None) -> int | None:
    """The causal window a fused-attention backward skips key tiles by: ``window``, or None (every causal key
    tile visited, the full causal layer's work and time) where the stack runs the attention in fp8
    (efficiency.runtime.fp8_dot_product_attention under a ``dtype`` of specs.system.LOW_PRECISION). cuDNN's
    own GPT-OSS attention benchmark (NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/gpt_oss
    gb300/gpt_oss_20260424_100022.csv and gb200/gpt_oss_20260424_100011.csv, cuDNN 9.22.0, cudnn-frontend
    1.21.1; causal with a 128-key window, b = 2, 128 heads of 64, the b·h = 256 of GPT-OSS 120B at MBS 4)
    times the backward at 2k / 4k / 8k / 16k / 32k tokens: bf16 0.227 / 0.442 / 0.862 / 1.712 / 3.450 ms on
    a GB300, linear in s (the band's tiles); MXFP8 0.581 / 1.871 / 6.648 / 24.996 / 96.913 ms (FP8 0.467 /
    1.480 / 5.189 / 19.354 / 74.763 ms), quadratic in s: the causal triangle (GB200 at 4k: bf16 0.465,
    MXFP8 2.080 ms). The later runs keep it: gb300/gpt_oss_20260707_182017.csv (cuDNN 9.24.0) MXFP8 4k
    backward 1.878 ms against bf16 0.440, gb200/gpt_oss_20260813_110803.csv (cuDNN 9.27.0) 2.070 against
    0.458 ms. The forward keeps the window (MXFP8 0.092 / 0.175 / 0.342 / 0.676 / 1.345 ms). Full
    causal layers run no slower in MXFP8 than in bf16 (the DeepSeek-V3 rows of the same benchmark,
    dsv3/gb300: 4k causal backward 2.348 against 3.127 ms), so only a window changes. Transformer Engine
    takes this kernel for a windowed layer with learnable sinks from cuDNN 9.21 (TransformerEngine
    b9d690e04 / 4329ff84 transformer_engine/common/fused_attn/fused_attn.cpp nvte_get_fused_attn_backend:
    NVTE_FP8 with {off-by-one, learnable} softmax from 9.21, no window condition; fused_attn_fp8.cu passes
    the window as set_diagonal_band_left_bound); with fp8_dpa set no other backend takes sinks (FlashAttention
    is dropped for a non-vanilla softmax, UnfusedDotProductAttention for FP8 attention: dot_product_attention/
    utils.py get_attention_backend), and a run without any backend raises."""
    if dtype in LOW_PRECISION and acc.efficiency.runtime.fp8_dot_product_attention:
        return None
    return window


def attention_op_s(op: Op, acc: AcceleratorSpec, dtype: str) -> tuple[float, float]:
    """(forward, backward) attention_time_s of a fused-attention op with its softmax exponentials; a block
    for causal-window layers (Op.attention_window: w, windowed share p, a windowed layer's score share) costs
    p × its windowed layers' time (cost.attention.window_tile_factor) + (1 − p) × its full layers', whose
    score share is a causal call's over the call's k keys, (1 + 1/k)/2 (graph.mla.window_fraction: k = s/c,
    the ring chunk, so (1 + c/s)/2). The backward of a windowed layer keeps its window only where
    fp8_backward_window does; else it is priced as the full layer's."""
    call, full_cf = op.attention_call, op.causal_fraction
    parts = [(1.0, full_cf, None)]
    if op.attention_window is not None and call is not None:
        window, share, window_cf = op.attention_window
        full_cf = window_fraction(None, call[1], 1)
        parts = [(share, window_cf, window), (1.0 - share, full_cf, None)]
    times = [0.0, 0.0]
    for share, cf, window in parts:
        bwd_window = fp8_backward_window(acc, dtype, window)
        bwd_cf = cf if bwd_window == window else full_cf  # the full layer's, as parts' second
        ways = ((op.fwd_flops, "fwd", cf, window), (op.bwd_flops, "bwd", bwd_cf, bwd_window))
        for i, (flops, way, share_cf, w) in enumerate(ways):
            exps = softmax_exponentials(op.fwd_flops, share_cf, call[2]) if call else 0.0
            times[i] += share * attention_time_s(flops, share_cf, acc, dtype, call, way, exps, w)
    return times[0], times[1]
