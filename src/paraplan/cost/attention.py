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
"""

from __future__ import annotations

from dataclasses import dataclass

AttentionKernel = str  # "fa2" | "fa3" | "cudnn"
KERNELS = ("fa2", "fa3", "cudnn")
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

# Kernels that do not run on an architecture fall back to the one named here (FlashAttention-3
# needs Hopper's TMA/WGMMA, Shah et al. 2024 §1; FA2 runs on Ampere and Hopper, Dao 2023 §1).
# cuDNN's fused attention on Ampere is taken at FlashAttention-2 speed (assumption: Figure 5's
# cuDNN advantage comes from Hopper-only instructions).
KERNEL_FALLBACK: dict[tuple[str, str], str] = {
    ("ampere", "fa3"): "fa2",
    ("ampere", "cudnn"): "fa2",
    ("volta", "fa3"): "fa2",
    ("volta", "cudnn"): "fa2",
    ("turing", "fa3"): "fa2",
    ("turing", "cudnn"): "fa2",
    # Ada (sm_89): FlashAttention-3 needs Hopper's wgmma/TMA (Shah et al. 2024, §3); as on Ampere
    ("ada", "fa3"): "fa2",
    ("ada", "cudnn"): "fa2",
}


def effective_kernel(kernel: str, architecture: str | None) -> str:
    """The kernel that actually runs: ``kernel``, or its fallback on an architecture it does not support."""
    return KERNEL_FALLBACK.get((architecture or "", kernel), kernel)


def attention_shape_factor(kernel: str, seq: float, head_dim: float, causal: bool) -> float:
    """s/(s + s_half) · [d'/(d' + d_half)] / [128/(128 + d_half)] · (s/(s + 128) if causal), d' = min(d, 128):
    the fraction of the kernel's head-dim-128 plateau reached at this shape (module docstring)."""
    curve = KERNEL_CURVES[kernel]
    d = min(head_dim, 128.0)
    head = d / (d + curve.head_dim_half) / (128.0 / (128.0 + curve.head_dim_half))
    factor = seq / (seq + curve.seq_half) * head
    if causal:
        factor *= seq / (seq + CAUSAL_TILE_ROWS)
    return factor


def attention_shape_scale(kernel: str, seq: float, head_dim: float, causal: bool) -> float:
    """Efficiency at this shape relative to ``REFERENCE_SHAPE``: shape factor ratio."""
    return attention_shape_factor(kernel, seq, head_dim, causal) / attention_shape_factor(
        kernel, *REFERENCE_SHAPE
    )


def kernel_relative_speed(to_kernel: str, from_kernel: str, architecture: str | None) -> float:
    """Speed of ``to_kernel`` over ``from_kernel`` at ``REFERENCE_SHAPE``: E·shape factor of each (FA3 paper
    Fig. 5, H100); 1 when both fall back to the same kernel. Other architectures use the Hopper ratios
    (assumption, docs/model.md)."""
    a, b = effective_kernel(to_kernel, architecture), effective_kernel(from_kernel, architecture)
    if a == b:
        return 1.0
    speed = {
        k: KERNEL_CURVES[k].plateau_tflops_h100 * attention_shape_factor(k, *REFERENCE_SHAPE)
        for k in (a, b)
    }
    return speed[a] / speed[b]


def converted_attention_fraction(
    fraction: float, to_kernel: str, from_kernel: str, architecture: str | None
) -> float:
    """An attention efficiency fraction measured with ``from_kernel`` as ``to_kernel`` runs it:
    min(1, fraction × kernel_relative_speed(to_kernel, from_kernel)) (FA3 paper Fig. 5 ratios), at most
    the peak."""
    return min(1.0, fraction * kernel_relative_speed(to_kernel, from_kernel, architecture))
