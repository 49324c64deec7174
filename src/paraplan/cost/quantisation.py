"""The quantisation kernels of an fp8 / FP4 recipe around each low-precision GEMM operand (issue 33).

Transformer Engine runs the quantisation of a GEMM's activation input (forward) and output gradient
(backward) as kernels of their own, apart from the GEMM (a ``torch._scaled_mm`` GEMM timing leaves them
out). Which passes run, and how many bytes each moves per operand element, is a property of the recipe
(``transformer_engine/pytorch/fp8.py`` at TE v2.8: ``DelayedScaling``, ``Float8CurrentScaling``,
``Float8BlockScaling``, ``MXFP8BlockScaling``, ``NVFP4BlockScaling``), which a framework profile states
(``FrameworkSpec.fp8_recipe`` → ``efficiency.runtime.fp8_recipe``, cost.runtimes). Per element, with q the
quantised bytes (1 for fp8; FP4 dtypes their 4 bits with block scales, specs.system.QUANTISED_INPUT_BYTES),
reading the bf16 operand costs 2 B:

| recipe | passes | bytes per element |
|---|---|---|
| delayed | one ``cast_transpose`` with the amax fused, the scale from the amax history of earlier steps | 2 + 2q |
| current | an ``amax`` pass (reads the operand), then the cast-transpose with the fresh scale | 2 + (2 + 2q) |
| blockwise | one pass computing 1x128 block scales and writing both orientations, fp32 scales | 2 + 2(q + 4/128) |
| mxfp8 | one pass, 32-element E8M0 scales, rowwise and columnwise copies (no transpose) | 2 + 2(q + 1/32) |
| mxfp4 | MXFP8's pass at FP4 bytes, q = 0.5 + 1/32 holding its E8M0 scales (OCP MX v1.0) | 2 + 2q |
| nvfp4 | a per-tensor amax pass (the second-level scale), then the block-scaled cast both ways | 2 + (2 + 2q) |
| nvfp4 + RHT | the amax pass, a rowwise cast, and a columnwise cast through the Hadamard transform | 2 + 2(2 + q) |

NVFP4 as Transformer Engine v2.12 runs it (``transformer_engine/common/recipe/__init__.py``
``NVFP4BlockScaling``: 16-element blocks with E4M3 scales under a per-tensor fp32 scale; the TE release
Megatron-Bridge v0.3.0, the NeMo 26.02 container, pins, 5671fd36): by default a random Hadamard transform (RHT,
16 x 16) is applied to the columnwise (wgrad) copies of activations and output gradients, weights take 16 x 16
2D block scales without RHT, and gradients are stochastically rounded. With RHT, ``NVFP4Quantizer::quantize_impl``
(``transformer_engine/pytorch/csrc/quantizer.cpp``) runs ``nvte_hadamard_transform_amax`` (one read: the rowwise
amax and the post-RHT columnwise amax), the rowwise ``nvte_quantize_v2`` (read 2, write q) and the fused
``nvte_hadamard_transform_cast_fusion_columnwise`` (read 2, write q): one more read of the operand than a cast
writing both orientations (``rht_cast_passes``). The transform is a 16-point product per element on the
tensor cores (32 FLOP per element, under 6 % of a 2 B read's time at HBM rate on Blackwell), so each pass is
priced by its bytes; stochastic rounding draws Philox numbers in registers and moves no bytes; the 2D weight
scales fill the same 1 x 16 scale layout the GEMM reads (no bytes beyond q). ``efficiency.runtime.nvfp4_rht``
(a framework profile's field) says whether the stack ran the transform. From TE pull request #2555 (ed424d306,
2026-03; in the TE of the NeMo 26.04 container, 71bbefbf, and later) one kernel,
``nvte_quantize_with_hadamard_transform``, writes the rowwise cast and the transformed columnwise cast from one
read of a bf16 operand whose rows are a multiple of 64 and columns of 128 (quantize_impl's
``eligible_for_rht_cast_fusion``; every Llama GEMM operand): 2 + (2 + 2q), the bytes of the plain nvfp4 row
(``efficiency.runtime.nvfp4_rht_cast_fusion``, a profile's field).

Both orientations are written because Hopper's fp8 GEMMs take TN operands only (wgrad needs Xᵀ and dYᵀ;
TE ``transformer_engine/common/transpose/cast_transpose.cu``) and the block-scaled formats scale along the
reduction dimension of each GEMM (TE ``MXFP8Quantizer`` / ``Float8BlockQuantizer`` rowwise and columnwise
usages). Weights are quantised once per step, not per micro-batch: TE keeps the quantised weight across the
micro-batches of a step (``is_first_microbatch``, which Megatron-Core's schedules set on the first
micro-batch), so their passes are priced once per step (``weight_quantisation_bytes``, in the step's tail).

Priced from the measured fp8 kernels where the system has them (the H100 table's ``fp8_kernels``: the
fused cast + transpose + amax pass and the amax pass, at the rate of the 16k-token rows, README of
benchmarks/gpu/measured/h100-2026-11-27b: the 4k-token fused rows are bounded by the host cost of calling
the compiled function), else at the bytes/s of the table's bf16 → fp32 cast (kernels.csv), else on the HBM
roofline (bytes / (bandwidth · efficiency.hbm) + the kernel overhead per pass). A pass's bytes that the
measured kernel does not move (scales, a 0.5 B FP4 element) scale its time by bytes.
"""

from __future__ import annotations

from paraplan.cost import kernel_tables as kt
from paraplan.specs.system import BLOCK_SCALE_BYTES, QUANTISED_INPUT_BYTES, AcceleratorSpec

READ_BYTES = 2.0  # the bf16 operand (Transformer Engine keeps activations and gradients in bf16)
FUSED_ROW = "fused_cast_transpose_amax"  # fp8_kernels.csv op: amax, fp8 tensor and transpose, 4 B per element
AMAX_ROW = "amax"  # fp8_kernels.csv op: one read of the bf16 operand, 2 B per element
FUSED_NOMINAL_BYTES = 4.0
CAST = "cast_bf16_fp32"  # kernels.csv: a bf16 → fp32 cast, 6 B per element
CAST_NOMINAL_BYTES = 6.0
# scale bytes per element and orientation of the fp8 block recipes: fp32 per 1x128 block (Float8BlockScaling),
# E8M0 per 32 (MXFP8: the OCP MX scale MXFP4 carries, specs.system.BLOCK_SCALE_BYTES)
BLOCKWISE_SCALE_BYTES = 4.0 / 128.0
MXFP8_SCALE_BYTES = BLOCK_SCALE_BYTES["mxfp4"]


def run_recipe(recipe: str, dtype: str) -> str:
    """The recipe a run's quantisation follows: FP4 dtypes their own block-scaled recipe (nvfp4; mxfp4 as
    mxfp8's pass at its bytes), fp8 the profile's (efficiency.runtime.fp8_recipe, a validated recipe name:
    cost.runtimes maps a profile's "none" to TE's default on Hopper, ``DelayedScaling``, fp8.py
    ``get_default_fp8_recipe``; Megatron-LM ``--fp8-recipe`` default delayed)."""
    if dtype == "nvfp4":
        return "nvfp4"
    if dtype == "mxfp4":
        return "mxfp8"
    return recipe


def amax_pass_bytes(recipe: str) -> float:
    """Bytes per element of the amax pass a recipe runs before its cast: 2 (one read of the bf16 operand)
    for current scaling (Float8CurrentScaling computes the scale from this step's amax) and NVFP4 (the
    per-tensor global amax of its two-level scale; with RHT the same read gives the post-transform amax too);
    0 where the amax is fused into the cast (delayed: the scale comes from the amax history; blockwise and
    MXFP8: per-block amax inside the quantise kernel)."""
    return READ_BYTES if recipe in ("current", "nvfp4") else 0.0


def oriented_bytes(recipe: str, dtype: str) -> float:
    """Bytes written per element and orientation: q (specs.system.QUANTISED_INPUT_BYTES; FP4 dtypes' q holds
    their block scales) plus the scale bytes an fp8 block recipe adds (fp32 per 1x128 block, Float8BlockScaling;
    E8M0 per 32, MXFP8BlockScaling); mxfp4 runs MXFP8's pass with its scales already in q."""
    q = QUANTISED_INPUT_BYTES.get(dtype, 1.0)
    if dtype != "fp8":
        return q
    return q + {"blockwise": BLOCKWISE_SCALE_BYTES, "mxfp8": MXFP8_SCALE_BYTES}.get(recipe, 0.0)


def cast_pass_bytes(recipe: str, dtype: str) -> float:
    """Bytes per element of one quantising pass writing both orientations: read 2, write 2(q + s)
    (``oriented_bytes``; module table)."""
    return READ_BYTES + 2.0 * oriented_bytes(recipe, dtype)


def rht_cast_passes(dtype: str) -> tuple[float, float]:
    """Bytes per element of NVFP4's two casts under the random Hadamard transform (module docstring): the
    rowwise cast, read 2 + write q, and the fused RHT + columnwise cast, read 2 + write q (TE v2.12
    quantizer.cpp ``NVFP4Quantizer::quantize_impl``: each reads the bf16 operand)."""
    one = READ_BYTES + oriented_bytes("nvfp4", dtype)
    return one, one


def cast_passes(recipe: str, dtype: str, rht: bool, rht_fused: bool = False) -> tuple[float, ...]:
    """Bytes per element of each quantising pass after the amax pass: NVFP4 with RHT its two casts
    (``rht_cast_passes``) unless ``rht_fused`` (TE pull request #2555's one kernel writing both casts from one
    read, module docstring), every other recipe one pass writing both orientations (``cast_pass_bytes``)."""
    if recipe == "nvfp4" and rht and not rht_fused:
        return rht_cast_passes(dtype)
    return (cast_pass_bytes(recipe, dtype),)


def operand_bytes(recipe: str, dtype: str, rht: bool = False, rht_fused: bool = False) -> float:
    """HBM bytes per operand element of the recipe's quantisation: amax pass + cast passes (module table);
    ``rht``: the stack runs NVFP4's Hadamard transform on this operand (activations and output gradients),
    ``rht_fused``: in one kernel with the rowwise cast (``cast_passes``)."""
    r = run_recipe(recipe, dtype)
    return amax_pass_bytes(r) + sum(cast_passes(r, dtype, rht, rht_fused))


def weight_quantisation_bytes(recipe: str, dtype: str, fp8_params: bool) -> float:
    """HBM bytes per transformer-layer weight element and step of its quantisation (0 outside the
    low-precision dtypes): with bf16 weights, the recipe's operand passes once per step (``operand_bytes``,
    the cached weight of ``is_first_microbatch``; NVFP4 weights take no Hadamard transform, TE
    ``NVFP4BlockScaling.fp4_quant_fwd_weight``); with fp8 primary weights (NeMo ``fp8_params``,
    Megatron-Core ``fp8_param_gather``) the optimizer writes the fp8 weight itself and what remains per local
    element is the transpose of the gathered weight for the dgrad GEMM, read q + write q (TE Float8Tensor's
    transpose cache, rebuilt once per step after the parameter all-gather)."""
    if dtype not in QUANTISED_INPUT_BYTES:
        return 0.0
    if fp8_params:
        return 2.0 * QUANTISED_INPUT_BYTES[dtype]
    return operand_bytes(recipe, dtype)


# one E4M3 scale per 16-element block (specs.system.BLOCK_SCALE_BYTES, as QUANTISED_INPUT_BYTES counts it)
NVFP4_SCALE_BYTES = BLOCK_SCALE_BYTES["nvfp4"]


def scale_swizzle_bytes(shape: tuple, dtype: str, swizzle: bool) -> tuple[float, ...]:
    """HBM bytes of each scale-swizzle kernel one GEMM call of (b, m, n, k) runs before cuBLASLt, Y = A·B with
    A of b·m·k and B of b·k·n elements: with ``swizzle`` (efficiency.runtime.nvfp4_scale_swizzle) and nvfp4,
    one kernel per operand reading and writing its scales, 2·E/16 B for E elements (E4M3 per 16); none else.
    Transformer Engine v2.12 (5671fd36): NVFP4 tensors are created with unswizzled scales
    (``NVFP4Quantizer::create_tensor``: ``with_gemm_swizzled_scales = false  /// TODO``), so
    ``extensions/gemm.cpp`` calls ``swizzle_scales_for_gemm`` on both operands of every GEMM (the cached weight
    too: the swizzled copy lives for that call only), one ``nvte_swizzle_scaling_factors`` per operand in the
    orientation the GEMM reads; grouped GEMMs swizzle each operand list in one multi-tensor kernel
    (``multi_tensor_swizzle_scales_for_gemm``). MXFP8 activations and gradients are quantised into the
    swizzled layout (``optimize_for_gemm``, but for sequence-parallel gathered operands); MXFP8's remaining
    per-call swizzles (weights, gathered operands: 1/32 B per element) are not priced."""
    if not swizzle or dtype != "nvfp4":
        return ()
    b, m, n, k = shape
    return tuple(2.0 * NVFP4_SCALE_BYTES * e for e in (b * m * k, b * k * n))


def measured_rate(acc: AcceleratorSpec, op: str, nominal: float, width: float) -> float | None:
    """Bytes/s of the measured fp8 kernel ``op`` at operand width ``width``: ``nominal`` bytes per element
    × the elements/s of its rows at the table's largest token count, log-log linear in the width and
    clamped to the measured edges (kernel_tables.top_rows_scatter); None without the row."""
    if not acc.kernel_tables:
        return None
    rates = kt.top_rows_scatter(acc.kernel_tables, acc.l2_cache, op)
    return None if rates is None else nominal * rates.rate((width,))


def copy_floor_s(acc: AcceleratorSpec) -> float:
    """Launch floor of one measured memory-bound kernel: the system's memory table's fastest copy
    (kernel_tables Scatter.floor_s), else ``efficiency.kernel_overhead_s`` (no table, or no memory file)."""
    memory = kt.load_table(acc.kernel_tables, acc.l2_cache).memory if acc.kernel_tables else None
    return memory.floor_s if memory is not None else acc.efficiency.kernel_overhead_s


def pass_time_s(
    acc: AcceleratorSpec, elements: float, rows: float, width: float, nbytes: float, amax: bool
) -> float:
    """Seconds of one quantisation pass over ``elements`` operand elements moving ``nbytes`` each: at the
    measured fp8 kernel's bytes/s (the amax row for an amax pass, the fused row for a cast pass), else at
    the table's bf16 → fp32 cast rate, each at least the copies' launch floor; else the HBM roofline
    E·b / (B_HBM·η_HBM) + kernel overhead (module docstring)."""
    if nbytes <= 0 or elements <= 0:
        return 0.0
    if acc.kernel_tables:
        name, nominal = (AMAX_ROW, READ_BYTES) if amax else (FUSED_ROW, FUSED_NOMINAL_BYTES)
        rate = measured_rate(acc, name, nominal, width)
        if rate is None:
            cast = kt.kernel_time_s(acc.kernel_tables, acc.l2_cache, CAST, (rows, width))
            rate = None if cast is None else CAST_NOMINAL_BYTES * rows * width / cast
        if rate is not None:
            return max(elements * nbytes / rate, copy_floor_s(acc))
    roofline = elements * nbytes / acc.hbm_rate()
    return roofline + acc.efficiency.kernel_overhead_s


def rht_fusion_eligible(rows: float, width: float) -> bool:
    """Whether Transformer Engine runs the fused Hadamard cast on an operand of ``rows`` × ``width``
    (TransformerEngine pull request #2555, pytorch/csrc/quantizer.cpp ``NVFP4Quantizer::quantize_impl``: a bf16
    input with rows % 64 == 0 and columns % 128 == 0; else the two-kernel path). A graph ``fp8_casts`` op carries
    its operands' summed width, so the rule reads that sum: exact where every operand qualifies (the sum then
    does) or the sum fails (then some operand does and the op is priced unfused); a sum that qualifies while one
    operand does not is priced fused."""
    return rows % 64 == 0 and width % 128 == 0


def operand_quantisation_s(
    acc: AcceleratorSpec, elements: float, rows: float, width: float, dtype: str
) -> float:
    """Seconds to quantise ``elements`` GEMM-operand elements (``rows`` tokens × ``width``) under the
    system's recipe (``efficiency.runtime.fp8_recipe``; NVFP4's Hadamard transform as
    ``efficiency.runtime.nvfp4_rht`` says, in one kernel with the rowwise cast where
    ``efficiency.runtime.nvfp4_rht_cast_fusion`` says and ``rht_fusion_eligible`` admits): its amax pass, if any,
    plus its cast passes."""
    runtime = acc.efficiency.runtime
    recipe = run_recipe(runtime.fp8_recipe, dtype)
    amax = pass_time_s(acc, elements, rows, width, amax_pass_bytes(recipe), True)
    fused = runtime.nvfp4_rht_cast_fusion and rht_fusion_eligible(rows, width)
    passes = cast_passes(recipe, dtype, runtime.nvfp4_rht, fused)
    return amax + sum(pass_time_s(acc, elements, rows, width, b, False) for b in passes)


def quantisation_times_s(op, acc: AcceleratorSpec, dtype: str) -> tuple[float, float]:
    """(forward, backward) of a graph ``fp8_casts`` op (kernel family ``fp8_cast``: tokens, summed operand
    width): the activation inputs forward, the output gradients backward (their element count the op's
    backward / forward bytes times the forward's), each by ``operand_quantisation_s``."""
    _, rows, width = op.kernel
    fwd_elems = rows * width
    bwd_elems = fwd_elems * (op.bwd_bytes / op.fwd_bytes if op.fwd_bytes else 0.0)
    fwd = operand_quantisation_s(acc, fwd_elems, rows, width, dtype)
    bwd_width = bwd_elems / rows if rows else 0.0
    return fwd, operand_quantisation_s(acc, bwd_elems, rows, bwd_width, dtype)
