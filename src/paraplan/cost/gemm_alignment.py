"""GEMMs whose dimensions break the 16-byte alignment tensor-core kernels need.

cuBLAS / cuBLASLt pick tensor-core kernels with vectorised (and, on Hopper, TMA) loads only when every
operand's leading dimension is a multiple of 16 bytes: 8 elements of a 16-bit type, 16 of an 8-bit
one, 4 of a 32-bit one (NVIDIA cuBLAS documentation, "Tensor Core Usage"; NVIDIA Deep Learning
Performance Guide, "Matrix Multiplication: Tensor Core Requirements"). A GEMM with one dimension off
that grid runs a slower kernel. Measured on one H100 SXM with PyTorch 2.11 + CUDA 13.0
(benchmarks/gpu/measured/h100-2026-11-27b/host/gemm_alignment.csv, GPT-2's LM head: 16,384 tokens x
768 x vocabulary 50,257 against the padded 50,304), the unaligned kernel reaches this share of the
aligned one's FLOP/s, by where the odd dimension sits in Y[m,n] = X[m,k]·W[k,n]:

| odd dimension | measured GEMM | TFLOP/s odd / padded | share |
|---|---|---|---|
| n (output columns) | forward t x V x h | 95.4 / 705.5 | 0.135 |
| k (depth) | data gradient t x h x V | 141.7 / 814.2 | 0.174 |
| m (output rows) | weight gradient V x h x t | 154.6 / 799.6 | 0.193 |

The shares are applied to every tensor-core dtype and accelerator (measured in bf16 on Hopper only;
tf32 and fp8 follow the same 16-byte rule, other generations are not measured); fp32 GEMMs without
TF32 run CUDA-core kernels and pay nothing. Frameworks that pad the vocabulary (Megatron's ``--make-vocab-size-divisible-by`` 128 x tp,
``pads_vocabulary`` in the profile) never run an unaligned LM head; a width that is not a whole
number of elements (a vocabulary split over tp ranks that does not divide it) can only exist padded,
so it counts as aligned.
"""

from __future__ import annotations

ALIGNMENT_BYTES = 16
# tensor-core dtype -> bytes of one GEMM operand element (fp8/fp4 recipes: the 8-bit operands; fp4
# packed in bytes). fp32 without TF32 runs CUDA-core kernels, which have no such requirement.
OPERAND_BYTES = {"tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "nvfp4": 1, "mxfp4": 1}
# share of the aligned rate with the odd dimension at (m, n, k): the table in the module docstring
UNALIGNED_SHARE_M = 154.6 / 799.6
UNALIGNED_SHARE_N = 95.4 / 705.5
UNALIGNED_SHARE_K = 141.7 / 814.2


_ELEMENTS = {dtype: ALIGNMENT_BYTES // size for dtype, size in OPERAND_BYTES.items()}


def _unaligned(width: float, elements: int) -> bool:
    """An integral width that is not a multiple of ``elements`` (fractional widths are padded)."""
    if type(width) is int:  # the shapes' usual type: no float round trip
        return width % elements != 0
    return float(width).is_integer() and int(width) % elements != 0


def gemm_alignment_share(m: float, n: float, k: float, dtype: str) -> float:
    """Share of the aligned GEMM rate reached by Y[m,n] = X[m,k]·W[k,n] (1.0 when aligned): the
    smallest measured share among its odd dimensions (module docstring)."""
    elements = _ELEMENTS.get(dtype)
    if elements is None:
        return 1.0
    share = 1.0
    if _unaligned(m, elements):
        share = UNALIGNED_SHARE_M
    if _unaligned(n, elements):
        share = min(share, UNALIGNED_SHARE_N)
    if _unaligned(k, elements):
        share = min(share, UNALIGNED_SHARE_K)
    return share
