"""Time of one kernel on one GPU: a roofline with size-dependent GEMM efficiency.

GEMMs run at ``peak · cap · wave_efficiency · depth_efficiency``: the output is cut into thread
block tiles that run in waves of one tile per SM, so the last partial wave and the tile padding
waste part of the machine (tile and wave quantization, NVIDIA "Matrix Multiplication Background
User's Guide", §"Tile quantization" and §"Wave quantization"); short reductions (small k) cannot
amortise each tile's load/store prologue. Memory-bound kernels run at a fraction of HBM bandwidth.
Every kernel pays a fixed launch/tail overhead. The achievable fractions (``cap``) live in the
system catalog with their sources and calibration notes (docs/model.md, "Efficiency"); the bf16 caps are
a published GEMM benchmark's kernel cap (``gemm_benchmark_cap``, catalog.gemm_benchmarks) times a fitted
in-step share.
"""

from __future__ import annotations

import math
from functools import lru_cache

from paraplan.cost import kernel_tables as tables
from paraplan.cost import table_grouped

# fused attention's time lives in cost.attention_time; attention_efficiency and attention_time_s are
# re-exported here for callers
from paraplan.cost.attention_time import attention_efficiency, attention_op_s, attention_time_s  # noqa: F401
from paraplan.cost.eager_kernels import eager_kernel_times_s
from paraplan.cost.gemm_alignment import gemm_alignment_share
from paraplan.cost.quantisation import scale_swizzle_bytes
from paraplan.graph.ops import Op
from paraplan.graph.transformer import ACTIVATION_BYTES
from paraplan.specs.system import QUANTISED_INPUT_BYTES, AcceleratorSpec, gemm_cap_key
from paraplan.units import parse_quantity

# Candidate thread-block tiles (rows, cols, relative per-SM throughput). cuBLAS picks among tile
# configurations per shape; smaller tiles reuse each loaded operand less (arithmetic intensity
# tm·tn/(tm+tn)), so they run slower per SM. Calibration note: relative throughputs are assumed
# (not fitted) from the intensity ratio, damped: 1 for 128x256, 0.95 for 128x128, 0.85 for 64x128.
TILE_CANDIDATES: tuple[tuple[int, int, float], ...] = (
    (128, 256, 1.0),
    (256, 128, 1.0),
    (128, 128, 0.95),
    (64, 128, 0.85),
    (128, 64, 0.85),
)

# Depth (k) at which a tile spends as long in its prologue/epilogue as in its main loop: the
# efficiency factor is k / (k + GEMM_K_HALF). Calibration note: set to one 32-deep pipeline stage of
# 4 k-blocks (CUTLASS multistage mainloop), not fitted to any validation case.
GEMM_K_HALF = 32.0


@lru_cache(maxsize=65536)
def gemm_wave_efficiency(batch: int, m: int, n: int, sm_count: int) -> float:
    """Best over tile shapes of useful/launched tile area: b·m·n / (waves·SMs·tm·tn) × tile throughput."""
    best = 0.0
    for tm, tn, rel in TILE_CANDIDATES:
        tiles = batch * math.ceil(m / tm) * math.ceil(n / tn)
        waves = math.ceil(tiles / sm_count)
        eff = rel * (batch * m * n) / (waves * sm_count * tm * tn)
        best = max(best, eff)
    return best


def gemm_depth_efficiency(k: int) -> float:
    """k / (k + k_half): a reduction of depth k amortises a fixed per-tile prologue/epilogue."""
    return k / (k + GEMM_K_HALF)


def gemm_efficiency(batch: int, m: int, n: int, k: int, acc: AcceleratorSpec, dtype: str) -> float:
    """Fraction of peak matrix FLOP/s in the GEMM's main loop: cap · wave/tile · depth factors."""
    return (
        acc.gemm_efficiency_cap(dtype)
        * gemm_wave_efficiency(batch, m, n, acc.sm_count)
        * gemm_depth_efficiency(k)
    )


def gemm_benchmark_cap(
    tflops: float, shape: tuple[int, int, int], acc: AcceleratorSpec, dtype: str
) -> float:
    """Kernel cap at which gemm_time_s without the step-level ramp reproduces a measured GEMM rate R at its shape:
    F / (peak · wave · depth · (F/R − t_kernel)), F = 2·m·n·k (catalog.gemm_benchmarks: one kernel timed alone)."""
    m, n, k = shape
    flops = 2.0 * m * n * k
    main_loop_s = flops / (tflops * 1e12) - acc.efficiency.kernel_overhead_s
    return flops / (
        acc.peak_matrix_flops(dtype)
        * gemm_wave_efficiency(1, m, n, acc.sm_count)
        * gemm_depth_efficiency(k)
        * main_loop_s
    )


# The in-step share of a per-shape kernel table's GEMMs where no calibration set one: the table's rate at each
# shape is taken as the in-step rate. The analytical caps' share (validate.fitted gemm.bf16) scales a best-shape
# benchmark (MAMF or a torch.mm loop) that the tile model carries to other shapes; half-precision kernels timed
# alone at their own shapes are already no faster than that in-step rate where a table and step-fitted caps meet
# (calibrate.in_step.in_step_ratios r: H100 1.052, H200 1.083; tests/unit/test_table_in_step_share.py). fp8
# kernels alone run faster (r 0.83 on H100): an fp8 table takes its share from calibrate (docs/model.md §6,
# "What the in-step share scales").
UNCALIBRATED_TABLE_SHARE = 1.0


def table_in_step_share(acc: AcceleratorSpec, dtype: str) -> float:
    """Share s of an attached table's isolated GEMM rate kept inside a step, for the cap that prices
    ``dtype`` (gemm_fp8 for fp8 / FP4, gemm otherwise): efficiency.table_in_step_share where ``paraplan
    calibrate`` set it (min(1, r), r the table's time over the base system's in-step time of the same GEMMs,
    calibrate.in_step), else UNCALIBRATED_TABLE_SHARE, for every table alike (the V100 DeepBench rows, the
    H800 DeepGEMM rows, a table attached on request). A step divides the table's kernel time by s
    (``table_kernel_s``; docs/model.md §2, §6; docs/calibration.md)."""
    return acc.efficiency.table_in_step_share.get(gemm_cap_key(dtype), UNCALIBRATED_TABLE_SHARE)


def table_clock_ratio(acc: AcceleratorSpec, dtype: str) -> float:
    """Measured part's datasheet matrix peak / this part's: the factor on a table's GEMM time where the
    table was measured on a sibling part at another clock (table.yaml ``peak_matrix_flops``, fp16 read as
    bf16; the DeepBench V100 SXM2 rows at 125 TFLOPS fp16 on the DGX-2H's 130 TFLOPS SXM3: 0.962, the
    clock ratio of the same silicon); 1 where the table states no peak or there is no table. Datasheet peaks (a power cap's
    clock_fraction applies apart)."""
    if not acc.kernel_tables:
        return 1.0
    return _clock_ratio(
        acc.kernel_tables, dtype, acc.peak_matrix_flops(dtype) / acc.clock_fraction()
    )


@lru_cache(maxsize=256)
def _clock_ratio(ref: str, dtype: str, peak: float) -> float:
    provenance = tables.table_provenance(ref).get("peak_matrix_flops") or {}
    peaks = {tables._dtype(k): v for k, v in provenance.items()}
    if tables._dtype(dtype) not in peaks:
        return 1.0
    field = f"{tables.FIELD}: {ref}/table.yaml peak_matrix_flops.{dtype}"
    return parse_quantity(peaks[tables._dtype(dtype)], "flops", field) / peak


def table_kernel_s(
    measured_s: float,
    flops: float,
    bmnk: tuple[int, int, int, int],
    acc: AcceleratorSpec,
    dtype: str,
) -> float:
    """A table's kernel time on this part for ``flops`` of the (b, m, n, k) shape: measured_s × flops / (2·b·m·n·k)
    (work-scaled, cost.kernel_tables) × ``table_clock_ratio`` / (``table_in_step_share`` × clock fraction): a
    table is timed at the rated power, so a power cap slows it by its clock share (specs.power). The one
    conversion of a table row to this part, for dense and grouped GEMMs alike."""
    b, m, n, k = bmnk
    ratio = table_clock_ratio(acc, dtype)
    share = table_in_step_share(acc, dtype) * acc.clock_fraction()
    return measured_s * flops / (2.0 * b * m * n * k) * ratio / share


def gemm_time_s(
    flops: float,
    shape: tuple[int, int, int, int],
    acc: AcceleratorSpec,
    dtype: str,
    leading_dims_aligned: bool = False,
) -> float:
    """flops / (peak_matrix(dtype) · gemm_efficiency) + GEMM ramp time + kernel overhead; with a
    measured table covering the GEMM (cost.kernel_tables): the table's kernel time on this part
    (``table_kernel_s``: × the measured part's peak / this part's, / in-step share, / clock share) + GEMM ramp time.

    The ramp term makes small GEMMs slower per FLOP: efficiency F/(F + R·t_ramp), the shape of the
    size-efficiency curves in Calculon's system files (Isaev et al. 2023; Calculon repository systems/*.json).
    It is a per-GEMM cost of the step, outside the kernel (launch gaps, dependent-kernel bubbles;
    docs/model.md §2), so it is added to a table's isolated-kernel time too. A GEMM with a dimension
    off the 16-byte grid runs at cost.gemm_alignment's share of the rate, unless the
    framework pads what would be unaligned (efficiency.aligned_gemms_only), or the caller knows no odd
    dimension is an operand's leading dimension (``leading_dims_aligned``: a routed expert's token count,
    cost.gemm_alignment)."""
    if flops <= 0:
        return 0.0
    compute_s, fixed_s = _gemm_compute(flops, shape, acc, dtype, leading_dims_aligned)
    floor_s = gemm_traffic_floor_s(_padded(shape), acc, dtype)
    return max(compute_s, floor_s) + acc.efficiency.gemm_ramp_s + fixed_s


def _padded(shape: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """A slice narrower than one row (vocab < tp) is padded to one (max(1, d), without a generator)."""
    b, m, n, k = shape
    return b if b > 1 else 1, m if m > 1 else 1, n if n > 1 else 1, k if k > 1 else 1


def gemm_compute_s(flops: float, shape: tuple, acc: AcceleratorSpec, dtype: str) -> float:
    """The rate term of ``gemm_time_s`` alone (no traffic floor, ramp or kernel overhead): a table's kernel time
    where one covers the GEMM, else flops / (peak · gemm_efficiency · alignment share); what ``paraplan
    calibrate`` fits a cap to (calibrate.fit.fit_gemm)."""
    return _gemm_compute(flops, shape, acc, dtype, False)[0] if flops > 0 else 0.0


def _gemm_compute(flops, shape, acc: AcceleratorSpec, dtype: str, leading_dims_aligned: bool):
    """(rate term, fixed cost outside the ramp) of ``gemm_time_s``: a measured kernel (cost.kernel_tables) carries
    its own launch, the analytical form adds efficiency.kernel_overhead_s."""
    b, m, n, k = _padded(shape)
    skip = leading_dims_aligned or acc.efficiency.aligned_gemms_only

    def share(aligned_flops: float) -> float:  # cost.gemm_alignment, at this GEMM's aligned rate
        return 1.0 if skip else gemm_alignment_share(m, n, k, dtype, acc, aligned_flops)

    if acc.kernel_tables:
        measured = tables.gemm_time_s(acc.kernel_tables, acc.l2_cache, b, m, n, k, dtype)
        if measured is not None:
            kernel_s = table_kernel_s(measured, flops, (b, m, n, k), acc, dtype)
            return kernel_s / share(flops / kernel_s), 0.0
    rate = acc.peak_matrix_flops(dtype) * gemm_efficiency(b, m, n, k, acc, dtype)
    return flops / (rate * share(rate)), acc.efficiency.kernel_overhead_s


def gemm_traffic_floor_s(
    shape: tuple[int, int, int, int], acc: AcceleratorSpec, dtype: str
) -> float:
    """The least time a GEMM of shape (b, m, n, k) takes to move its operands once through HBM:
    [(b·m·k + b·k·n)·e_in + b·m·n·e_out] / HBM bandwidth, the memory side of the
    roofline (Williams, Waterman & Patterson, "Roofline", CACM 52(4), 2009): e_in the stored bytes of
    an input element (a quantised recipe's, specs.system.QUANTISED_INPUT_BYTES, else the activation
    dtype's), e_out the activation dtype's (a low-precision GEMM writes bf16), at the datasheet bandwidth
    (no efficiency share: a bound no kernel beats, not an estimate of a copy). Binding only where a
    GEMM's output is large against its depth k, e.g. the batched score GEMM Q·Kᵀ of unfused attention
    (b·heads × s × s × head_dim), whose rate no table row of a weight GEMM states."""
    b, m, n, k = shape
    out_bytes = ACTIVATION_BYTES[dtype]
    in_bytes = QUANTISED_INPUT_BYTES.get(dtype, out_bytes)
    moved = (b * m * k + b * k * n) * in_bytes + b * m * n * out_bytes
    return moved / acc.hbm_bandwidth


def gemm_kernel_time_s(
    flops: float, shape: tuple[int, int, int, int], acc: AcceleratorSpec, dtype: str
) -> float:
    """The GEMM kernel's own time: ``gemm_time_s`` less the step-level GEMM ramp it adds (a cost of the
    step outside the kernel, docs/model.md §2), what a kernel table times alone."""
    return gemm_time_s(flops, shape, acc, dtype) - acc.efficiency.gemm_ramp_s


def memory_time_s(
    bytes_moved: float, acc: AcceleratorSpec, flops: float = 0.0, dtype: str = "bf16"
) -> float:
    """max(f · bytes / (HBM bandwidth · hbm efficiency), FLOPs / peak vector FLOP/s) + kernel overhead
    (roofline of an element-wise kernel; Williams et al. 2009), or the measured table's time of a copy
    moving f · bytes (cost.kernel_tables); f = efficiency.eager_traffic_factor, the eager stack's
    traffic relative to the op graph's fused count (1 for fused stacks; cost.frameworks)."""
    if bytes_moved <= 0 and flops <= 0:
        return 0.0
    bytes_moved = bytes_moved * acc.efficiency.eager_traffic_factor
    if acc.kernel_tables and bytes_moved > 0:
        measured = tables.memory_time_s(acc.kernel_tables, acc.l2_cache, bytes_moved)
        if measured is not None:  # measured copies (cost.kernel_tables): launch floor included
            return max(measured, flops / acc.peak_vector_flops(dtype))
    memory_s = bytes_moved / acc.hbm_rate()
    return max(memory_s, flops / acc.peak_vector_flops(dtype)) + acc.efficiency.kernel_overhead_s


# Transformer Engine runs a grouped GEMM (GroupedLinear, Megatron-Core's TEGroupedMLP) as one cuBLAS
# GEMM per expert issued round-robin on its compute streams: transformer_engine/common/include/
# transformer_engine/multi_streams.h, ``num_streams = 4``.
GROUPED_GEMM_STREAMS = 4


def grouped_gemm_share(acc: AcceleratorSpec, dtype: str) -> float:
    """Share of the dense rate peak · gemm_efficiency_cap an expert GEMM reaches at most, the bound the search's
    floors divide by (search.bounds). The analytical implementations (``grouped_gemm_time_s``) price each
    expert's GEMM at no more than the dense rate of its dtype (the fp8 multi-stream loop's kept share of the fp8
    speed-up, ``te_multistream_grouped_s``, only adds time): 1. A library's published one-kernel rates
    (``deepgemm_grouped_s``: the DeepGEMM table on dgx-h800, isolated kernels at ``table_in_step_share``) may beat
    it: their fastest rate as ``table_kernel_s`` converts it to this part (× in-step share × clock fraction /
    table_clock_ratio) over the dense rate, when above 1."""
    if acc.kernel_tables:
        impl = acc.efficiency.runtime.grouped_gemm
        fastest = table_grouped.fastest_rate(acc.kernel_tables, acc.l2_cache, impl, dtype)
        if fastest is not None:
            on_part = (
                fastest
                * table_in_step_share(acc, dtype)
                * acc.clock_fraction()
                / table_clock_ratio(acc, dtype)
            )
            dense = acc.peak_matrix_flops(dtype) * acc.gemm_efficiency_cap(dtype)
            return max(1.0, on_part / dense)
    return 1.0


def expert_loop_s(
    flops: float, shape: tuple[int, int, int, int], acc: AcceleratorSpec, dtype: str
) -> float:
    """Σ of the b per-expert GEMMs' kernel main loops of (m, n, k) at the dense rate of ``dtype``: with a
    measured table, its per-expert loop time on this part (``table_kernel_s``; kernel_tables.grouped_gemm_time_s,
    the loop_time_us column or b × the dense rows); else flops / (peak · gemm_efficiency(1, m, n, k)), a dense
    GEMM's rate per expert (no fixed costs: the implementation adds them)."""
    b, m, n, k = shape
    if acc.kernel_tables:
        measured = tables.grouped_gemm_time_s(acc.kernel_tables, acc.l2_cache, b, m, n, k, dtype)
        if measured is not None:  # measured per-expert loop (cost.kernel_tables)
            return table_kernel_s(measured, flops, (b, m, n, k), acc, dtype)
    rate = acc.peak_matrix_flops(dtype) * gemm_efficiency(1, m, n, k, acc, dtype)
    return flops / rate


def multistream_fixed_s(b: int, acc: AcceleratorSpec, measured: bool) -> float:
    """Fixed costs of b per-expert GEMMs on GROUPED_GEMM_STREAMS streams that cannot overlap:
    ⌈b/streams⌉ × (GEMM ramp + kernel overhead), gemm_time_s's per-kernel costs (the ramp alone after a
    measured loop, whose kernel overhead the timing holds)."""
    fixed = acc.efficiency.gemm_ramp_s + (0.0 if measured else acc.efficiency.kernel_overhead_s)
    return math.ceil(b / GROUPED_GEMM_STREAMS) * fixed


def te_multistream_grouped_s(
    flops: float, shape: tuple[int, int, int, int], acc: AcceleratorSpec, dtype: str
) -> float:
    """Transformer Engine GroupedLinear (Megatron-Core TEGroupedMLP, ``--moe-grouped-gemm``): one GEMM per
    expert on GROUPED_GEMM_STREAMS streams (transformer_engine/pytorch/module/grouped_linear.py at TE v2.8,
    general_grouped_gemm): ``expert_loop_s`` + ``multistream_fixed_s``. In fp8 with b ≥ 2 the loop keeps a
    share s = efficiency.grouped_gemm_fp8 ∈ [0, 1] of the dense fp8 speed-up over bf16 (each expert's
    split quantised and multiplied on its own, with its own scales; a fitted share, validate.fitted
    moe.grouped_gemm_fp8, docs/model.md §8): t = t_bf16 − s · max(0, t_bf16 − t_fp8), both loops at the
    dense rates of their dtype plus the same fixed costs. So fp8 is never slower than bf16 at the same
    layout (issue 33): s ≥ 0 by the field's bounds, and the speed-up is taken as no less than 0 (a stated
    clamp: it falls below 0 only where the bf16 loop comes from a measured table and the fp8 one from the
    analytical rate, two sources; the fp8 tensor rate is twice the bf16 one on every part with fp8). One expert
    (b = 1) is the dense GEMM of its dtype, ``gemm_time_s`` (issue 33), at the aligned rate as the loop: the
    expert's routed token count (m forward and data gradient, k weight gradient) is no operand's leading
    dimension (activations are stored token-major, leading dimension the hidden width), which is what
    cost.gemm_alignment's measured shares concern."""
    b = shape[0]
    if b == 1:  # one local expert: GroupedLinear with one GEMM, the dense GEMM (issue 33)
        return gemm_time_s(flops, shape, acc, dtype, leading_dims_aligned=True)
    measured = bool(acc.kernel_tables) and (
        tables.grouped_gemm_time_s(acc.kernel_tables, acc.l2_cache, *shape, dtype) is not None
    )
    own = expert_loop_s(flops, shape, acc, dtype) + multistream_fixed_s(b, acc, measured)
    if dtype != "fp8":
        return own
    bf16 = te_multistream_grouped_s(flops, shape, acc, "bf16")
    return bf16 - acc.efficiency.grouped_gemm_fp8 * max(0.0, bf16 - own)


def one_kernel_grouped_s(
    flops: float, shape: tuple[int, int, int, int], acc: AcceleratorSpec, dtype: str
) -> float:
    """A true grouped kernel (torch._grouped_mm, CUTLASS grouped GEMM, DeepGEMM's m-grouped GEMMs): all
    experts' tiles in one launch, priced as one batched GEMM of b × (m, n, k) (``gemm_time_s``: the wave
    quantisation over b·tiles, one ramp and one kernel overhead). One expert is the dense GEMM; fp8 at the
    dense fp8 rate (the quantisation passes are the graph's fp8_casts ops, cost.quantisation); the routed token
    counts are no leading dimension (``te_multistream_grouped_s``), so no alignment share."""
    return gemm_time_s(flops, shape, acc, dtype, leading_dims_aligned=True)


def torch_grouped_mm_s(
    flops: float, shape: tuple[int, int, int, int], acc: AcceleratorSpec, dtype: str
) -> float:
    """torch._grouped_mm (torchtitan's MoE): with b ≥ 2 experts and a table that timed that kernel (its grouped
    file's ``time_us`` column, kernel_tables.grouped_mm_time_s), the measured kernel on this part
    (``table_kernel_s``) + one GEMM ramp, as a dense GEMM from a table (``gemm_time_s``: one launch); else
    ``one_kernel_grouped_s``. The per-expert loop column (``expert_loop_s``) is not this kernel."""
    b, m, n, k = shape
    if b > 1 and acc.kernel_tables:
        measured = tables.grouped_mm_time_s(acc.kernel_tables, acc.l2_cache, b, m, n, k, dtype)
        if measured is not None:
            kernel_s = table_kernel_s(measured, flops, shape, acc, dtype)
            return kernel_s + acc.efficiency.gemm_ramp_s
    return one_kernel_grouped_s(flops, shape, acc, dtype)


def deepgemm_grouped_s(
    flops: float, shape: tuple[int, int, int, int], acc: AcceleratorSpec, dtype: str
) -> float:
    """DeepGEMM's m-grouped GEMMs (deepseek-ai/DeepGEMM, one kernel over all experts): with b ≥ 2 experts and a
    table holding DeepGEMM's published rates in this dtype (kind grouped_gemm_deepgemm, cost.table_grouped;
    catalog/kernels/h800-deepgemm: fp8), max(the table's kernel on this part (``table_kernel_s``), the HBM
    traffic floor, efficiency.kernel_overhead_s) + one GEMM ramp, as a dense GEMM from a table (``gemm_time_s``:
    one launch); else ``one_kernel_grouped_s``. One expert is the dense GEMM (issue 33). fp8 stays no slower
    than bf16: every table rate (815-1346 TFLOP/s) is above any bf16 rate on the part (peak · cap · wave ·
    depth ≤ 989.4 · 0.743 on H800 / H100 SXM), and bf16 pays the ramp and the overhead too."""
    b, m, n, k = shape
    if b > 1 and acc.kernel_tables:
        measured = table_grouped.library_grouped_time_s(
            acc.kernel_tables, acc.l2_cache, "deepgemm", b, m, n, k, dtype
        )
        if measured is not None:
            kernel_s = table_kernel_s(measured, flops, shape, acc, dtype)
            floor_s = max(gemm_traffic_floor_s(shape, acc, dtype), acc.efficiency.kernel_overhead_s)
            return max(kernel_s, floor_s) + acc.efficiency.gemm_ramp_s
    return one_kernel_grouped_s(flops, shape, acc, dtype)


GROUPED_GEMM_IMPLEMENTATIONS = {
    "te-multistream": te_multistream_grouped_s,
    "cutlass-grouped": one_kernel_grouped_s,
    "torch-grouped-mm": torch_grouped_mm_s,
    "deepgemm": deepgemm_grouped_s,
}


def grouped_gemm_time_s(
    flops: float, shape: tuple[int, int, int, int], acc: AcceleratorSpec, dtype: str
) -> float:
    """b expert GEMMs of (m, n, k) by the stack's grouped-GEMM implementation
    (efficiency.runtime.grouped_gemm, specs.runtime: GROUPED_GEMM_IMPLEMENTATIONS). An op marked ``one_kernel``
    (Op.one_kernel: Transformer Engine's fused grouped MLP, graph.moe_mlp.fuses_grouped_mlp, whose cuDNN CuTe DSL
    kernels run every local expert's block-scaled GEMM in one launch) is priced by ``one_kernel_grouped_s``
    whatever the stack's implementation (``op_times_s``): the dense rate of ``dtype``, not the per-expert loop's
    fitted fp8 share."""
    if flops <= 0:
        return 0.0
    implementation = GROUPED_GEMM_IMPLEMENTATIONS[acc.efficiency.runtime.grouped_gemm]
    return implementation(flops, shape, acc, dtype)


def scale_swizzle_s(shape: tuple, acc: AcceleratorSpec, dtype: str) -> float:
    """Seconds of the scale-swizzle kernels one block-scaled GEMM call runs before its GEMM: Σ over
    cost.quantisation.scale_swizzle_bytes (one kernel per operand, nvfp4 at Transformer Engine v2.12) of
    ``memory_time_s``, an HBM-bound kernel each (the measured copies, else bytes / (B_HBM·η) + kernel overhead)."""
    swizzle = acc.efficiency.runtime.nvfp4_scale_swizzle
    return sum(memory_time_s(nbytes, acc) for nbytes in scale_swizzle_bytes(shape, dtype, swizzle))


def gemm_calls(
    fwd_flops: float, bwd_flops: float, shape: tuple, input_grad: bool
) -> list[tuple[float, tuple]]:
    """(FLOPs, (b, m, n, k)) of a weight GEMM's kernel calls, forward first: backward of Y[m,n] = X[m,k]·W[k,n]
    is dX = dY·Wᵀ (m×k, depth n) and dW = Xᵀ·dY (k×n, depth m), half the backward FLOPs each; dW alone
    where the input needs no gradient (``input_grad`` False)."""
    b, m, n, k = shape
    if not input_grad:
        return [(fwd_flops, shape), (bwd_flops, (b, k, n, m))]
    half = bwd_flops / 2.0
    return [(fwd_flops, shape), (half, (b, m, k, n)), (half, (b, k, n, m))]


def dglu_dbias_s(gemm_s: float, ratio: float) -> float:
    """Seconds of the fused grouped MLP's dGLU + dbias kernel (Op.dgrad_epilogue "dglu_dbias": the fc2 dgrad
    grouped GEMM, the GLU backward and the fc1 bias gradient reduced in its epilogue) whose GEMM is priced
    ``gemm_s``: t = r · gemm_s, r = efficiency.runtime.moe_dglu_dbias_ratio, a release's measured time of that
    kernel over its time in the releases around it. cuDNN frontend 1.24.0 and 1.25.0 under CUTLASS DSL 4.5
    (NVIDIA/cudnn-frontend issue #256, 'grouped_gemm_dglu_wrapper_sm100 became slower between 1.23.0 and
    1.24.0'; pull request #322, merged 2026-06-23: the dbias reduction loop spilled to local memory) time it at
    1362.768 µs against 155.632 µs after the fix (138.960-139.392 µs without dbias, before and after), on SM100
    at the issue's shape: r = 1362.768 / 155.632 = 8.756. The ratio holds at another row count of the same N
    and K, since the main loop and the epilogue's per-tile reduction both scale with the output tiles; the
    issue's dGeGLU + dbias workload is GPT-OSS's (hidden 2880, expert width 2880 in the 20B and 120B models)."""
    return gemm_s * ratio


def op_times_s(op: Op, acc: AcceleratorSpec, dtype: str) -> tuple[float, float]:
    """(forward, backward) time of one op: GEMMs on tensor cores, fused attention, or HBM-bound (an eager
    stack's norms, activations, residual adds and loss from the measured kernels where the system's table
    has them: cost.eager_kernels). A GEMM runs in ``op.dtype`` where the graph states one (else the plan's
    ``dtype``); one whose input needs no gradient (``op.input_grad`` False) runs dW alone in backward."""
    if op.kind in ("gemm", "grouped_gemm"):
        assert op.gemm_shape is not None
        gemm_dtype = op.dtype or dtype

        def call(flops: float, shape: tuple) -> float:  # one GEMM call and its scale swizzles
            if flops <= 0:
                return 0.0
            if op.kind == "gemm":
                kernel = gemm_time_s(flops, shape, acc, gemm_dtype)
            elif op.one_kernel:  # every local expert in one launch (grouped_gemm_time_s)
                kernel = one_kernel_grouped_s(flops, shape, acc, gemm_dtype)
            else:
                kernel = grouped_gemm_time_s(flops, shape, acc, gemm_dtype)
            return kernel + scale_swizzle_s(shape, acc, gemm_dtype)

        (fwd, shape), *bwd = gemm_calls(op.fwd_flops, op.bwd_flops, op.gemm_shape, op.input_grad)
        backward = [call(f, s) for f, s in bwd]
        if (
            op.dgrad_epilogue == "dglu_dbias" and op.input_grad
        ):  # the dgrad call is the fused dGLU kernel
            backward[0] = dglu_dbias_s(backward[0], acc.efficiency.runtime.moe_dglu_dbias_ratio)
        return call(fwd, shape), sum(backward)
    if op.kind == "host_sync":  # no kernel: its GPU idle is priced on the host (cost.host)
        return 0.0, 0.0
    if op.kind == "attention":
        return attention_op_s(op, acc, dtype)
    eager = eager_kernel_times_s(op, acc, dtype) if op.kernel is not None else None
    if eager is not None:
        return eager
    return memory_time_s(op.fwd_bytes, acc, op.fwd_flops, dtype), memory_time_s(
        op.bwd_bytes, acc, op.bwd_flops, dtype
    )


def kernel_cap(system_name: str, dtype: str = "bf16") -> float:
    """A catalog system's GEMM kernel cap from its published GEMM benchmark row
    (catalog.gemm_benchmarks): gemm_benchmark_cap at the row's TFLOP/s and shape on the system's accelerator."""
    from paraplan.catalog import load_system
    from paraplan.catalog.gemm_benchmarks import GEMM_BENCHMARK_BF16, GEMM_BENCHMARK_FP8

    row = (GEMM_BENCHMARK_FP8 if dtype == "fp8" else GEMM_BENCHMARK_BF16)[system_name]
    return gemm_benchmark_cap(
        row.tflops, row.shape, load_system(system_name).accelerator, row.dtype
    )
