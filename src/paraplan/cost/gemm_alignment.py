"""GEMMs whose dimensions break the 16-byte alignment tensor-core kernels need.

cuBLAS / cuBLASLt pick tensor-core kernels with vectorised (and, on Hopper, TMA) loads only when every
operand's leading dimension is a multiple of 16 bytes: 8 elements of a 16-bit type, 16 of an 8-bit
one, 4 of a 32-bit one (NVIDIA cuBLAS documentation, "Tensor Core Usage"; NVIDIA Deep Learning
Performance Guide, "Matrix Multiplication: Tensor Core Requirements"). A GEMM with one dimension off
that grid runs a slower kernel. Measured on one H100 SXM with PyTorch 2.11 + CUDA 13.0
(benchmarks/gpu/measured/h100-2026-11-27b/host/gemm_alignment.csv, GPT-2's LM head: 16,384 tokens x
768 x vocabulary 50,257 against the padded 50,304; 132 SMs, 1,980 MHz maximum SM clock in its
env_align.json), the unaligned kernel reaches this share of the aligned one's FLOP/s, by where the odd
dimension sits in Y[m,n] = X[m,k]·W[k,n]:

| odd dimension | measured GEMM | TFLOP/s odd / padded | share | odd FLOP per SM per clock |
|---|---|---|---|---|
| n (output columns) | forward t x V x h | 95.4 / 705.5 | 0.135 | 365 |
| k (depth) | data gradient t x h x V | 141.7 / 814.2 | 0.174 | 542 |
| m (output rows) | weight gradient V x h x t | 154.6 / 799.6 | 0.193 | 592 |

By architecture (``UNALIGNED_RATE_ARCHITECTURES``):

- Ampere and Ada run an odd bf16 / fp16 GEMM on CUTLASS's sm75-era align-1 kernels
  (``cutlass_75_tensorop_bf16_s1688gemm_..._align1``: 2-byte loads through registers, no cp.async,
  which moves 4, 8 or 16 bytes): read in kernel traces on an RTX 4090 (pytorch/pytorch#181718) and
  on an A100-SXM4-40GB at an odd vocabulary (pegainfer-project/pegainfer
  docs/models/qwen35/decode-kernel-attribution.md at 07dabf2, finding 4). The aligned kernels there
  are mma.sync ones too, so what an odd dimension costs is that kernel's own rate, which the
  H100 measurement gives per SM per clock (last column; Hopper's align-1 fallback is the same class,
  its aligned kernels TMA + wgmma). On a part of these architectures with a stated SM clock
  (``sm_clock_ghz``) the odd GEMM runs at ``unaligned_rate_flops``: that rate x SMs x clock, and the
  share is that over the aligned rate, at most 1. Checked on the one other measurement:
  pytorch/pytorch#181718 times bf16 N x N x N on an RTX 4090 (128 SMs, 2.52 GHz boost) at 106.8 to
  115.6 TFLOP/s for odd N = 2055-2073 (align-1 kernel) against 155.9 at N = 2040; the rule gives
  365 x 128 x 2.52 GHz = 117.7 TFLOP/s, 2 to 10 % above.
- Hopper and Blackwell (TMA-class aligned kernels) take the measured H100 shares; so does every
  other architecture (Volta, Turing, AMD CDNA, none stated), for which no measurement is in the
  project: the shares are kept there as a stated default, not a measurement of that part.

The shares are applied to every tensor-core dtype (measured in bf16; tf32 and fp8 follow the same
16-byte rule); fp32 GEMMs without TF32 run CUDA-core kernels and pay nothing. Frameworks that pad the
vocabulary (Megatron's ``--make-vocab-size-divisible-by`` 128 x tp, ``pads_vocabulary`` in the
profile) never run an unaligned LM head; a width that is not a whole number of elements (a vocabulary
split over tp ranks that does not divide it) can only exist padded, so it counts as aligned.
"""

from __future__ import annotations

from paraplan.specs.system import AcceleratorSpec

ALIGNMENT_BYTES = 16
# tensor-core dtype -> bytes of one GEMM operand element (fp8/fp4 recipes: the 8-bit operands; fp4
# packed in bytes). fp32 without TF32 runs CUDA-core kernels, which have no such requirement.
OPERAND_BYTES = {"tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "nvfp4": 1, "mxfp4": 1}
# the H100 measurement (module docstring): FLOP/s of the odd and the padded GEMM by odd dimension
H100_UNALIGNED_FLOPS = {"m": 154.6e12, "n": 95.4e12, "k": 141.7e12}
H100_ALIGNED_FLOPS = {"m": 799.6e12, "n": 705.5e12, "k": 814.2e12}
H100_SM_COUNT = 132
H100_SM_CLOCK_HZ = 1.98e9  # nvidia-smi clocks.max.sm of the measured board (env_align.json)
# the measured H100 share of the aligned rate by odd dimension (0.193 / 0.135 / 0.174)
_SHARES = {d: H100_UNALIGNED_FLOPS[d] / H100_ALIGNED_FLOPS[d] for d in H100_UNALIGNED_FLOPS}
# architectures whose odd GEMMs run the sm75-era align-1 kernel next to mma.sync aligned ones
UNALIGNED_RATE_ARCHITECTURES = frozenset({"ampere", "ada"})

_ELEMENTS = {dtype: ALIGNMENT_BYTES // size for dtype, size in OPERAND_BYTES.items()}


def _unaligned(width: float, elements: int) -> bool:
    """An integral width that is not a multiple of ``elements`` (fractional widths are padded)."""
    if type(width) is int:  # the shapes' usual type: no float round trip
        return width % elements != 0
    return float(width).is_integer() and int(width) % elements != 0


def odd_dimensions(m: float, n: float, k: float, dtype: str) -> tuple[str, ...]:
    """Which of Y[m,n] = X[m,k]·W[k,n]'s dimensions are off the 16-byte grid of ``dtype`` ("m", "n",
    "k"); none for a dtype without the requirement (fp32 on CUDA cores)."""
    elements = _ELEMENTS.get(dtype)
    if elements is None:
        return ()
    return tuple(d for d, w in (("m", m), ("n", n), ("k", k)) if _unaligned(w, elements))


def unaligned_rate_flops(dimension: str, acc: AcceleratorSpec) -> float | None:
    """FLOP/s of the align-1 fallback kernel with the odd ``dimension`` on ``acc``: r · SMs · f_SM ·
    clock share, r = the H100's measured odd-GEMM FLOP/s / (132 SMs · 1.98 GHz) (module docstring,
    365 / 542 / 592 FLOP per SM per clock for n / k / m), f_SM the part's boost clock; None where the
    architecture is not one of UNALIGNED_RATE_ARCHITECTURES or the clock is not stated."""
    if acc.architecture not in UNALIGNED_RATE_ARCHITECTURES or acc.sm_clock_ghz is None:
        return None
    per_sm_clock = H100_UNALIGNED_FLOPS[dimension] / (H100_SM_COUNT * H100_SM_CLOCK_HZ)
    return per_sm_clock * acc.sm_count * acc.sm_clock_ghz * 1e9 * acc.clock_fraction()


def gemm_alignment_share(
    m: float, n: float, k: float, dtype: str, acc: AcceleratorSpec | None = None, aligned_flops=0.0
) -> float:
    """Share of the aligned GEMM rate reached by Y[m,n] = X[m,k]·W[k,n] (1.0 when aligned): the
    smallest among its odd dimensions of min(1, unaligned_rate_flops / ``aligned_flops``, the GEMM's
    aligned FLOP/s on ``acc``) on an Ampere / Ada part with a stated clock, else of the measured H100
    shares (module docstring)."""
    share = 1.0
    for dimension in odd_dimensions(m, n, k, dtype):
        rate = None if acc is None else unaligned_rate_flops(dimension, acc)
        if rate is not None and aligned_flops:
            share = min(share, rate / aligned_flops)
        else:
            share = min(share, _SHARES[dimension])
    return share
