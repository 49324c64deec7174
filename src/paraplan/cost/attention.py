"""Fused-attention kernel efficiency by kernel generation, sequence length, head width and masking.

Component data: Shah et al. 2024, FlashAttention-3 (arXiv:2407.08608), Figure 5, forward speed on
H100 80GB SXM5 (BF16, non-causal, batch·seq = 16k, hidden 2048), TFLOP/s at sequence length
512 / 1k / 2k / 4k / 8k / 16k:

| kernel | head dim 64 | head dim 128 |
|---|---|---|
| FlashAttention-2 | 282 306 318 321 322 324 | 309 350 362 368 370 370 |
| cuDNN | 335 373 395 408 412 413 | 497 574 617 609 600 595 |
| FlashAttention-3 | 333 392 460 476 496 497 | 467 565 625 638 646 648 |

Each kernel's head-dim-128 curve is fitted (least mean relative error) by ``E · s/(s + s_half)``:
FA2 E = 378, s_half = 107 (mean error 1.1 %); cuDNN E = 627, s_half = 134 (2.6 %); FA3 E = 672,
s_half = 220 (1.6 %). The head-width factor ``d/(d + d_half)`` (d capped at 128: wider heads do not
speed up FA2 or cuDNN in the same figure) takes d_half from the 64-vs-128 ratio at 16k: FA2 21,
cuDNN 101, FA3 55. A causal mask computes the diagonal tiles in full: of the T(T+1)/2 tiles of a
T = s/128 tile-row score matrix only T²/2 are useful, a factor s/(s + 128) (128-row query tiles,
FA2 §3.1 / FA3 §3.1 block sizes). The backward pass is taken to follow the same shape factors
(assumption: Figure 5 is forward only).

The catalog's ``efficiency.attention`` is the fraction of peak of its ``attention_kernel`` at the
reference shape ``REFERENCE_SHAPE`` (causal, 8k tokens, head dim 128); other shapes scale by the
ratio of shape factors, other kernels by the ratio of plateaus (``kernel_relative_speed``).

``triton_flash`` is Tri Dao's FlashAttention in Triton (flash_attn/flash_attn_triton.py of flash-attn 1.0.x,
run by llm-foundry for ``attn_impl: triton``: llmfoundry/models/layers/flash_attn_triton.py at 5e85bd62d is
"Copied from" it and built on ``triton_pre_mlir``, the pre-MLIR Triton 2.0.0.dev20221202 backend). Its
speed is stated against FlashAttention (v1, CUDA) by its author (file docstring: Triton forward faster than
the CUDA forward, backward slower, "Overall Triton forward + backward is slightly slower than CUDA forward +
backward") and by llm-foundry (TUTORIAL.md at 5e85bd62d: "`triton` is slightly faster than `flash`", flash
being flash-attn 1.0.x there), so it is priced at FlashAttention v1's rate: FlashAttention-2's curve at the
same shape times ``FA1_OVER_FA2`` (``triton_fa2_ratio``), read from Dao 2023 (FlashAttention-2,
arXiv:2307.08691) Figure 4, forward + backward TFLOP/s on A100 80GB SXM4 at 512 / 1k / 2k / 4k / 8k / 16k
tokens (Dao-AILab/flash-attention assets/flash2_a100_fwd_bwd_benchmark.png):

| mask, head dim | FlashAttention | FlashAttention-2 |
|---|---|---|
| non-causal, 64 | 91 92 104 108 110 110 | 132 153 162 171 175 176 |
| non-causal, 128 | 76 72 76 80 82 83 | (hidden by the legend) 173 187 196 201 203 |
| causal, 64 | 58 70 77 87 92 97 | 88 119 140 156 165 171 |
| causal, 128 | 55 62 69 76 80 83 | 99 133 155 173 182 189 |

(The figure's "FlashAttention Triton" bars are OpenAI's triton.ops.flash_attention, which the repository's
benchmarks/benchmark_flash_attention.py of the time imported, not this kernel; they lie within 10 % of the
FlashAttention bars at head dim 128.) Figure 4 gives forward + backward together only, so one ratio prices
both directions (the pair then takes Figure 4's combined time). FLOPs and memory are unchanged (same
algorithm). The ratio holds on Ampere (measured there) and elsewhere by assumption, except on Hopper.

Hopper: neither kernel uses wgmma or TMA (FlashAttention-2 issues Ampere's mma.sync, Shah et al. 2024 §1;
the pre-MLIR backend predates Hopper and lowers ``tl.dot`` to mma.sync), whose ceiling is about 2/3 of the
H100's dense tensor peak (Luo et al. 2024, arXiv:2402.13499, as the FlashAttention-3 release notes cite
it): 0.667 · 989 = 659 TFLOP/s, 2.11x the A100's 312. The Triton kernel is taken to keep its A100
fraction of that ceiling (0.44 · 182 / 312 = 0.26 at causal 8k, head dim 128, so 0.17 of the H100's dense
peak, 171 TFLOP/s), while FlashAttention-2 measured 1.69x its A100 speed on H100 (FA2 README H100 80GB SXM5
forward + backward, causal, head dim 128, 8k: 308 vs 182 TFLOP/s): on Hopper the ratio is multiplied by
``HOPPER_MMA_SYNC_CARRY`` = 2.11 / 1.69 (assumption: the ceiling, not FlashAttention-2's Hopper losses,
bounds the older kernel; the ratio alone would keep FlashAttention-2's 1.69x).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

AttentionKernel = str  # "fa2" | "fa3" | "cudnn" | "triton_flash"
KERNELS = ("fa2", "fa3", "cudnn", "triton_flash")
CAUSAL_TILE_ROWS = 128  # query rows per tile (FA2 / FA3 block size)
REFERENCE_SHAPE = (8192, 128, True)  # (sequence per kernel call, head dim, causal)


@dataclass(frozen=True)
class KernelCurve:
    """``E · s/(s + s_half) · d/(d + d_half)`` fitted to FA3 paper Figure 5 (module docstring)."""

    plateau_tflops_h100: float  # E at head dim 128 on H100 SXM5
    seq_half: float
    head_dim_half: float


KERNEL_CURVES: dict[str, KernelCurve] = {
    "fa2": KernelCurve(378.0, 107.0, 21.0),
    "cudnn": KernelCurve(627.0, 134.0, 101.0),
    "fa3": KernelCurve(672.0, 220.0, 55.0),
}

FIGURE4_SEQ = (512, 1024, 2048, 4096, 8192, 16384)
# (causal, head dim) -> (sequence lengths, FlashAttention / FlashAttention-2 fwd+bwd), Dao 2023 Figure 4
FA1_OVER_FA2: dict[tuple[bool, int], tuple[tuple[int, ...], tuple[float, ...]]] = {
    (False, 64): (
        FIGURE4_SEQ,
        tuple(a / b for a, b in zip((91, 92, 104, 108, 110, 110), (132, 153, 162, 171, 175, 176))),
    ),
    (False, 128): (
        FIGURE4_SEQ[1:],
        tuple(a / b for a, b in zip((72, 76, 80, 82, 83), (173, 187, 196, 201, 203))),
    ),
    (True, 64): (
        FIGURE4_SEQ,
        tuple(a / b for a, b in zip((58, 70, 77, 87, 92, 97), (88, 119, 140, 156, 165, 171))),
    ),
    (True, 128): (
        FIGURE4_SEQ,
        tuple(a / b for a, b in zip((55, 62, 69, 76, 80, 83), (99, 133, 155, 173, 182, 189))),
    ),
}
MMA_SYNC_SHARE_HOPPER = 2.0 / 3.0  # of H100 dense tensor peak (Luo et al. 2024, arXiv:2402.13499)
H100_A100_DENSE_PEAK = 989.0 / 312.0  # bf16 dense TFLOP/s, SXM datasheets
FA2_H100_OVER_A100 = 308.0 / 182.0  # FA2 fwd+bwd causal d128 8k: FA2 README H100 / Dao 2023 Fig. 4
HOPPER_MMA_SYNC_CARRY = MMA_SYNC_SHARE_HOPPER * H100_A100_DENSE_PEAK / FA2_H100_OVER_A100

# Kernels that do not run on an architecture fall back to the one named here (FlashAttention-3
# needs Hopper's TMA/WGMMA, Shah et al. 2024 §1; FA2 runs on Ampere and Hopper, Dao 2023 §1).
# cuDNN's fused attention on Ampere is taken at FlashAttention-2 speed (assumption: Figure 5's
# cuDNN advantage comes from Hopper-only instructions).
# Ampere, Volta, Turing and Ada (sm_89): no FlashAttention-3 (it needs Hopper's wgmma/TMA, Shah et al. 2024, §3), and
# cuDNN's fused attention taken at FlashAttention-2 speed, as above.
_FA2_ARCHITECTURES = ("ampere", "volta", "turing", "ada")
# After Hopper: FlashAttention-3 is built for sm90 only (Dao-AILab/flash-attention README, "FlashAttention-3 beta
# release": "Requirements: H100 / H800 GPU"; its hopper/ kernels issue sm90a wgmma). Transformer Engine, which a
# stack asking for it runs it through, drops it on any other device ("Disabling FlashAttention 3 for compute
# capability != sm90") and on sm90+ prefers FusedAttention, cuDNN's kernel ("Disabling FlashAttention to give
# FusedAttention preference on Hopper+ for performance reasons"): NVIDIA/TransformerEngine
# transformer_engine/pytorch/attention/dot_product_attention/utils.py get_attention_backend (v2.x). So data-centre
# Blackwell (sm100/sm103) and Rubin run cuDNN's fused attention in its place; RTX Blackwell (sm120) runs
# neither FA3 nor the data-centre Blackwell kernels and prices FlashAttention-2 as its catalog entries do
# (rtx-5090-8, rtx-pro-6000-4); AMD CDNA has no FA3 (a CUDA sm90 build) and prices FlashAttention-2 as its
# catalog entries do (mi300x-8, mi355x-8: the ROCm flash-attention port is FlashAttention-2).
_FA3_IN_PLACE = {
    "blackwell": "cudnn",
    "rubin": "cudnn",
    "blackwell-rtx": "fa2",
    "cdna3": "fa2",
    "cdna4": "fa2",
}
KERNEL_FALLBACK: dict[tuple[str, str], str] = {
    (architecture, kernel): "fa2"
    for architecture in _FA2_ARCHITECTURES
    for kernel in ("fa3", "cudnn")
} | {(architecture, "fa3"): kernel for architecture, kernel in _FA3_IN_PLACE.items()}


def effective_kernel(kernel: str, architecture: str | None) -> str:
    """The kernel that actually runs: ``kernel``, or its fallback on an architecture it does not support."""
    return KERNEL_FALLBACK.get((architecture or "", kernel), kernel)


def kernel_fallback(kernel: str, architecture: str | None) -> str | None:
    """The kernel priced in place of ``kernel`` on ``architecture`` (KERNEL_FALLBACK), None where ``kernel``
    itself runs: what an estimate reports beside the kernel its profile or system asks for."""
    runs = effective_kernel(kernel, architecture)
    return runs if runs != kernel else None


def _interpolated_ratio(causal: bool, head_dim: int, seq: float) -> float:
    """Figure 4's FlashAttention / FlashAttention-2 ratio for one (mask, head dim) row at ``seq``: linear
    in log2(s) between the measured lengths, the end value outside them."""
    seqs, ratios = FA1_OVER_FA2[(causal, head_dim)]
    if seq <= seqs[0]:
        return ratios[0]
    for s0, r0, s1, r1 in zip(seqs, ratios, seqs[1:], ratios[1:]):
        if seq <= s1:
            return r0 + math.log2(seq / s0) / math.log2(s1 / s0) * (r1 - r0)
    return ratios[-1]


def triton_fa2_ratio(seq: float, head_dim: float, causal: bool) -> float:
    """Speed of the Triton FlashAttention kernel over FlashAttention-2 at this shape on Ampere, taken as
    FlashAttention v1's (Dao 2023 Figure 4, A100 forward + backward; module docstring): the mask's row
    interpolated linearly in log2(s), and linearly in head dim between the 64 and 128 rows (the nearer
    row outside them)."""
    lo, hi = _interpolated_ratio(causal, 64, seq), _interpolated_ratio(causal, 128, seq)
    w = min(1.0, max(0.0, (head_dim - 64.0) / 64.0))
    return lo + w * (hi - lo)


@dataclass(frozen=True)
class RatioKernel:
    """A kernel priced as another kernel's curve times a measured ratio at the same shape (module docstring)."""

    base: str  # the kernel whose fitted curve (KERNEL_CURVES) it is priced on
    ratio: Callable[
        [float, float, bool], float
    ]  # (seq, head dim, causal) -> its speed over the base's
    hopper_carry: float  # its speed factor on Hopper beyond the (Ampere-measured) ratio


RATIO_KERNELS: dict[str, RatioKernel] = {
    "triton_flash": RatioKernel("fa2", triton_fa2_ratio, HOPPER_MMA_SYNC_CARRY),
}


def architecture_carry(kernel: str, architecture: str | None) -> float:
    """A ratio kernel's speed factor on ``architecture`` beyond its Ampere ratio: on Hopper its
    ``hopper_carry`` (triton_flash: ``HOPPER_MMA_SYNC_CARRY`` = (2/3 · 989/312) / (308/182), mma.sync ceiling
    growth over FlashAttention-2's measured growth, module docstring), else 1."""
    ratio_kernel = RATIO_KERNELS.get(kernel)
    if ratio_kernel is not None and architecture == "hopper":
        return ratio_kernel.hopper_carry
    return 1.0


def base_kernel(kernel: str) -> str:
    """The kernel whose fitted curve prices ``kernel``: itself, or for a ratio kernel its base."""
    ratio_kernel = RATIO_KERNELS.get(kernel)
    return kernel if ratio_kernel is None else ratio_kernel.base


def attention_shape_factor(
    kernel: str, seq: float, head_dim: float, causal: bool, window: int | None = None
) -> float:
    """s/(s + s_half) · [d'/(d' + d_half)] / [128/(128 + d_half)] · (s/(s + 128) if causal), d' = min(d, 128):
    the fraction of the kernel's head-dim-128 plateau reached at this shape (module docstring); for
    a ratio kernel (``RATIO_KERNELS``) its base's factor × its ratio (``triton_flash``: FlashAttention-2's ×
    ``triton_fa2_ratio``); × window_tile_factor(kernel, s, ``window``) for a causal call (1 without a
    window): the analytical relative rate of a call, which the catalog's efficiency (attention_shape_scale)
    and a measured table's rows (cost.table_attention) scale by."""
    ratio_kernel = RATIO_KERNELS.get(kernel)
    if ratio_kernel is not None:
        base = attention_shape_factor(ratio_kernel.base, seq, head_dim, causal)
        factor = base * ratio_kernel.ratio(seq, head_dim, causal)
    else:
        curve = KERNEL_CURVES[kernel]
        d = min(head_dim, 128.0)
        head = d / (d + curve.head_dim_half) / (128.0 / (128.0 + curve.head_dim_half))
        factor = seq / (seq + curve.seq_half) * head
        if causal:
            factor *= seq / (seq + CAUSAL_TILE_ROWS)
    return factor * (window_tile_factor(kernel, seq, window) if causal else 1.0)


def visited_key_tiles(seq: float, window: int | None) -> float:
    """Key tiles of ``CAUSAL_TILE_ROWS`` a causal tiled kernel computes per query tile, averaged over the
    T = ceil(s/128) query tiles of a call: query tile i (rows 128i..128i+127) meets the key tiles
    i − m..i that hold its rows' keys, m = ceil((w − 1)/128) for a causal window of w keys (query j sees
    keys j − w + 1..j), so min(i, m) + 1 tiles; without a window m = T − 1 and the mean is (T + 1)/2,
    with one [(m + 1)(m + 2)/2 + (T − m − 1)(m + 1)]/T. A tile is computed whole, its masked scores too:
    the block loop skips only tiles wholly masked (Dao 2023, FlashAttention-2, §3.1.1; for a window,
    Dao-AILab/flash-attention csrc/flash_attn/src/flash_fwd_kernel.h compute_attn_1rowblock, v2.x:
    n_block_min = max(0, (m_block·kBlockM − window_size_left)/kBlockN), n_block_max =
    ceil((m_block + 1)·kBlockM / kBlockN)); cuDNN's kernel takes the window as a left bound likewise
    (Transformer Engine fused_attn ``window_size``)."""
    tiles = math.ceil(seq / CAUSAL_TILE_ROWS)
    m = tiles - 1 if window is None else min(tiles - 1, math.ceil((window - 1) / CAUSAL_TILE_ROWS))
    return ((m + 1) * (m + 2) / 2.0 + (tiles - m - 1) * (m + 1)) / tiles


def window_tile_factor(kernel: str, seq: float, window: int | None) -> float:
    """Rate of a causal layer with a window of w keys over a full causal layer of the same call (kernel,
    s tokens, head dim): the window's useful share of its computed tiles, (w − w(w − 1)/2s) useful keys a
    query over 128 × ``visited_key_tiles``, against the full layer's s/(s + 128) (the causal term of
    ``attention_shape_factor``), times the sequence term at the keys one query tile's loop runs over,
    k = min(s, 128(m + 1)), against s: k/(k + s_half) / (s/(s + s_half)) (s_half: the fixed cost of a
    query tile's loop, in keys, FlashAttention-3 paper Fig. 5 fit, module docstring). 1 where w ≥ s."""
    if window is None or window >= seq:
        return 1.0
    half = KERNEL_CURVES[base_kernel(kernel)].seq_half
    useful = window - window * (window - 1) / (2.0 * seq)
    tile_share = useful / (CAUSAL_TILE_ROWS * visited_key_tiles(seq, window))
    span = min(seq, CAUSAL_TILE_ROWS * (math.ceil((window - 1) / CAUSAL_TILE_ROWS) + 1))
    seq_term = span / (span + half) / (seq / (seq + half))
    return tile_share / (seq / (seq + CAUSAL_TILE_ROWS)) * seq_term


def attention_shape_scale(
    kernel: str, seq: float, head_dim: float, causal: bool, window: int | None = None
) -> float:
    """Efficiency at this shape (and causal ``window``) relative to ``REFERENCE_SHAPE``: shape factor ratio."""
    return attention_shape_factor(kernel, seq, head_dim, causal, window) / attention_shape_factor(
        kernel, *REFERENCE_SHAPE
    )


def kernel_relative_speed(to_kernel: str, from_kernel: str, architecture: str | None) -> float:
    """Speed of ``to_kernel`` over ``from_kernel`` at ``REFERENCE_SHAPE``: E·shape factor of each (FA3 paper
    Fig. 5, H100; a ratio kernel: its base's × ratio × ``architecture_carry``); 1 when both fall back to
    the same kernel. Other architectures use the Hopper ratios
    (assumption, docs/model.md)."""
    a, b = effective_kernel(to_kernel, architecture), effective_kernel(from_kernel, architecture)
    if a == b:
        return 1.0
    return kernel_speed(a, *REFERENCE_SHAPE, architecture) / kernel_speed(
        b, *REFERENCE_SHAPE, architecture
    )


def kernel_speed(
    kernel: str, seq: float, head_dim: float, causal: bool, architecture: str | None
) -> float:
    """The kernel's speed at this shape in the H100 units of ``KERNEL_CURVES`` (only ratios between kernels
    on one architecture are meaningful): E(base kernel) · ``attention_shape_factor`` ·
    ``architecture_carry``."""
    curve = KERNEL_CURVES[base_kernel(kernel)]
    factor = attention_shape_factor(kernel, seq, head_dim, causal)
    return curve.plateau_tflops_h100 * factor * architecture_carry(kernel, architecture)


def converted_attention_fraction(
    fraction: float, to_kernel: str, from_kernel: str, architecture: str | None
) -> float:
    """An attention efficiency fraction measured with ``from_kernel`` as ``to_kernel`` runs it:
    min(1, fraction × kernel_relative_speed(to_kernel, from_kernel)) (FA3 paper Fig. 5 ratios), at most
    the peak."""
    return min(1.0, fraction * kernel_relative_speed(to_kernel, from_kernel, architecture))
