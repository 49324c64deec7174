"""Fit a system's constants to measurements with plain linear least squares.

Every measurement is predicted by paraplan's own cost functions (cost/comm.py, cost/compute.py,
the estimator), and each is linear in the constants fitted, once written in the right form:

- collectives: t = S·(k_nv/(B_nv·η_nv) + k_nic/(B_nic·η_nic)) + c_in·α_nv + c_out·α_nic, linear in
  (1/η_nv, 1/η_nic, α_nv, α_nic); the coefficients k and c come from ``collective_coefficients``
  evaluated on unit systems (efficiency 1, one latency set to 1 s, the other to 0);
- GEMMs: t = F/(P·w·d)·(1/cap) + (t_ramp + t_kernel), linear in (1/cap, t_ramp + t_kernel), with the
  wave/tile and depth factors w, d of ``gemm_efficiency``;
- fused attention: t = F·f_causal/P·(1/η_att) + t_kernel; memory-bound kernels: t = B/BW·(1/η_hbm) + t_kernel;
- step times: each overlap cost enters the step as exposed + cost·(total − exposed); the two costs
  interact through the overlap windows, so they are fitted by Gauss-Newton (linear least squares
  on finite-difference slopes, repeated until the step is below 1e-9).

Rows are weighted by 1/t (least squares on relative errors), so small messages and kernels count
as much as large ones. A constant no measurement constrains keeps its base value and is reported
as not identified. Fitted fractions above 1 mean the measurement beats paraplan's algorithm model
(e.g. NVLink SHARP all-reduce); they are capped at 1 and reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from paraplan.calibrate.readers import AttentionSample, GemmSample, NcclRun, each_row, row_place
from paraplan.cost.comm import GroupSpan, collective_latency_hops, linear_collective
from paraplan.cost.compute import (
    attention_time_s,
    gemm_compute_s,
    gemm_traffic_floor_s,
    memory_time_s,
)
from paraplan.cost import kernel_tables
from paraplan.cost.kernel_tables import l2_resident
from paraplan.specs.errors import InputError
from paraplan.specs.system import SystemSpec
from paraplan.sweep.params import apply_overrides

EFF = "accelerator.efficiency"
NVLINK_EFF, NIC_EFF = "node.nvlink_efficiency", "network.efficiency"
NVLINK_LAT, NIC_LAT = "node.nvlink_latency", "network.latency"
NVLINK_OVERLAP, NIC_OVERLAP = "node.nvlink_overlap_cost", "network.overlap_cost"


def with_values(system: SystemSpec, values: dict[str, float]) -> SystemSpec:
    """The system with dotted-path fields replaced (re-validated)."""
    return apply_overrides(None, system, values)[1]  # type: ignore[arg-type]


@dataclass
class Residual:
    """How well the fitted constants reproduce one input (relative errors of its rows)."""

    source: str
    what: str
    points: int
    rms_rel: float
    max_rel: float


@dataclass
class FitPart:
    """Constants fitted from one kind of measurement, with notes and residuals."""

    values: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    residuals: list[Residual] = field(default_factory=list)


def _solve(rows: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least squares on relative errors; columns that no row touches are left out (NaN)."""
    used = np.any(rows != 0.0, axis=0)
    x = np.full(rows.shape[1], np.nan)
    weighted = rows[:, used] / times[:, None]
    sol, *_ = np.linalg.lstsq(weighted, np.ones(len(times)), rcond=None)
    x[used] = sol
    return x, used


def _residual(source: str, what: str, predicted: np.ndarray, measured: np.ndarray) -> Residual:
    rel = predicted / measured - 1.0
    return Residual(
        source, what, len(rel), float(np.sqrt(np.mean(rel**2))), float(np.max(np.abs(rel)))
    )


def _fraction(part: FitPart, path: str, inverse: float, label: str) -> None:
    """Store 1/inverse as a fraction of peak; cap at 1 with a note; a non-positive slope (the data
    show no size dependence) leaves the base value, noted."""
    if not math.isfinite(inverse) or inverse <= 0:
        part.notes[path] = (
            f"{label}: not identified (fitted time does not grow with size); base value kept"
        )
        return
    value = 1.0 / inverse
    if value > 1.0:
        part.notes[path] = (
            f"{label}: fitted {value:.3f} > 1 (faster than paraplan's algorithm model); capped at 1"
        )
        value = 1.0
    part.values[path] = value


# ---- measurements faster than the hardware ----------------------------------------------------
PEAK_SLACK = (
    1.05  # measured data may beat the system's peak by this much (clock boost, timer noise)
)
# in-network reduction (NVLink SHARP / NVLS, InfiniBand SHARP) halves the bytes an all-reduce moves
# per GPU (the switch reduces: (n−1)/n instead of 2(n−1)/n), so its bus bandwidth may reach 2× the link's
IN_NETWORK_REDUCTION_GAIN = {"all_reduce": 2.0}


def refuse_beyond_peak(flag: str, source: str, peak_s, measured_s, what: str) -> None:
    """InputError naming the first row measured more than PEAK_SLACK× faster than the time at the
    system's peak (``peak_s``: the same work at 100 % efficiency, no overhead): such data are in the
    wrong units or for another system, and fitting them gives efficiencies far above 1 (issue 37:
    calibrate accepted data 8,000× faster than the peak). Rows: ``source`` line 2 on (CSV header line 1)."""
    for i, (ideal, t) in enumerate(zip(peak_s, measured_s)):
        if t * PEAK_SLACK < ideal:
            raise InputError(
                f"{row_place(flag, source, i)}: {ideal / t:.3g}× faster than the system's peak "
                f"{what} (at most {PEAK_SLACK}× allowed); check the time unit and the system"
            )


# ---- collectives ------------------------------------------------------------------------------
def nccl_span(run: NcclRun, system: SystemSpec, domain_spans_nodes: bool = False) -> GroupSpan:
    """The nccl-tests ranks on the hierarchy: ranks per NVLink domain and domains spanned. A host is
    one NVLink domain, unless ``domain_spans_nodes`` (rack-scale NVLink such as GB200 NVL72, where
    the hosts of a rack share one domain of ``gpus_per_domain`` GPUs)."""
    domain = system.node.gpus_per_domain
    per_node = max(1, run.ranks // run.nodes)
    per_domain = min(run.ranks, domain) if domain_spans_nodes else min(per_node, domain)
    return GroupSpan(run.ranks, per_domain, math.ceil(run.ranks / per_domain))


def collective_columns(
    kind: str, span: GroupSpan, system: SystemSpec
) -> tuple[float, float, float, float]:
    """(per-byte seconds at η_nv = 1, per-byte at η_nic = 1, latency per second of α_nv, per second of α_nic).
    The latency columns are the hop counts of the algorithm NCCL picks at the system's own α
    (cost.comm.collective_latency_hops: ring or tree for all-reduce), so the fit keeps that choice."""
    unit = with_values(system, {NVLINK_EFF: 1.0, NIC_EFF: 1.0, NVLINK_LAT: 1.0, NIC_LAT: 1.0})
    form = linear_collective(kind, span, unit)
    if kind in ("all_reduce", "all_gather", "reduce_scatter"):
        hops = collective_latency_hops(
            kind, span, system.node.nvlink_latency, system.network.latency
        )
        return form.slope_in, form.slope_out, float(hops[0]), float(hops[1])
    return form.slope_in, form.slope_out, form.latency_in, form.latency_out


def fit_network(
    runs: list[NcclRun], system: SystemSpec, domain_spans_nodes: bool = False
) -> FitPart:
    """η_nv, η_nic, α_nv, α_nic from nccl-tests runs (all-to-all: read and reported, not fitted)."""
    part = FitPart()
    usable = [r for r in runs if r.kind != "all_to_all" and r.ranks > 1]
    for r in runs:
        if r.kind == "all_to_all":
            part.notes.setdefault(
                "all_to_all",
                f"{r.source}: no paraplan cost term uses all-to-all yet; read, not fitted",
            )
    if not usable:
        return part
    blocks, times, cols = [], [], []
    for r in usable:
        c = collective_columns(r.kind, nccl_span(r, system, domain_spans_nodes), system)
        gain = IN_NETWORK_REDUCTION_GAIN.get(r.kind, 1.0)
        ideal = [size * (c[0] + c[1]) / gain for size in r.sizes_bytes]
        refuse_beyond_peak("--nccl", r.source, ideal, r.times_s, "link bandwidth")
        cols.append(c)
        for size, t in zip(r.sizes_bytes, r.times_s):
            blocks.append([size * c[0], size * c[1], c[2], c[3]])
            times.append(t)
    rows, meas = np.array(blocks), np.array(times)
    x, used = _solve(rows, meas)
    names = [NVLINK_EFF, NIC_EFF, NVLINK_LAT, NIC_LAT]
    for i, path in enumerate(names):
        if not used[i]:
            part.notes[path] = "not identified (no run exercises this tier); base value kept"
            continue
        if i < 2:
            _fraction(part, path, x[i], path)
        else:
            part.values[path] = max(0.0, float(x[i]))
    fitted = with_values(system, part.values)
    for r, c in zip(usable, cols):
        eff_nv, eff_nic = fitted.node.nvlink_efficiency, fitted.network.efficiency
        pred = np.array(
            [
                s * (c[0] / eff_nv + c[1] / eff_nic)
                + c[2] * fitted.node.nvlink_latency
                + c[3] * fitted.network.latency
                for s in r.sizes_bytes
            ]
        )
        part.residuals.append(
            _residual(
                r.source, f"{r.kind} {r.ranks} ranks / {r.nodes} nodes", pred, np.array(r.times_s)
            )
        )
    return part


# ---- kernels --------------------------------------------------------------------------------
def cache_resident(samples: list[tuple[float, float]], system: SystemSpec) -> list[bool]:
    """Rows that run from the accelerator's L2 cache (cost.kernel_tables.l2_resident), which say
    nothing about η_hbm."""
    return [l2_resident(b, system.accelerator.l2_cache) for b, _ in samples]


def fit_memory(samples: list[tuple[float, float]], system: SystemSpec, source: str) -> FitPart:
    """η_hbm and the per-kernel overhead from memory-bound kernel timings; cache-resident rows
    (``cache_resident``) are left out of the fit and the peak check, and said so in a note."""
    part = FitPart()
    cached = cache_resident(samples, system)
    # (with fewer than 2 rows above L2 the rule cannot apply: every row is fitted and checked)
    left_out = cached if any(cached) and len(samples) - sum(cached) >= 2 else [False] * len(samples)
    unit = with_values(system, {f"{EFF}.hbm": 1.0, f"{EFF}.kernel_overhead_s": 0.0}).accelerator
    ideal = [0.0 if out else memory_time_s(b, unit) for (b, _), out in zip(samples, left_out)]
    refuse_beyond_peak("--memory", source, ideal, [t for _, t in samples], "HBM bandwidth")
    if any(left_out):
        part.notes[f"{EFF}.hbm"] = (
            f"{sum(cached)} of {len(samples)} rows of {source} fit in the "
            f"{system.accelerator.l2_cache / 1e6:.0f} MB L2 cache (cache-resident): left out of the HBM fit"
        )
        samples = [s for s, out in zip(samples, left_out) if not out]
    rows = np.array([[memory_time_s(b, unit), 1.0] for b, _ in samples])
    meas = np.array([t for _, t in samples])
    x, _ = _solve(rows, meas)
    # time that grows with size by less than a millionth of the largest timing is no growth (least squares
    # on flat timings returns a slope of rounding size, whose sign depends on the LAPACK build)
    if x[0] * float(np.ptp(rows[:, 0])) <= 1e-6 * float(meas.max()):
        x[0] = 0.0
    _fraction(part, f"{EFF}.hbm", x[0], "hbm")
    part.values[f"{EFF}.kernel_overhead_s"] = max(0.0, float(x[1]))
    pred = (
        rows[:, 0] / part.values.get(f"{EFF}.hbm", system.accelerator.efficiency.hbm)
        + part.values[f"{EFF}.kernel_overhead_s"]
    )
    part.residuals.append(
        _residual(source, "memory copies (HBM-resident), analytical fallback form", pred, meas)
    )
    return part


def attention_flops(s: AttentionSample) -> tuple[float, float]:
    """(FLOPs, causal fraction) as paraplan's graph counts them (cost.kernel_tables.attention_flops,
    causal_share)."""
    flops = kernel_tables.attention_flops(s.batch, s.heads, s.seq_len, s.head_dim, s.direction)
    return flops, kernel_tables.causal_share(s.seq_len, s.causal)


def fit_attention(
    samples: list[AttentionSample], system: SystemSpec, source: str, overhead_s: float | None
) -> FitPart:
    """Fused-attention efficiency (and the kernel overhead when no memory-kernel table fixed it)."""
    part = FitPart()
    unit = with_values(
        system, {f"{EFF}.attention": 1.0, f"{EFF}.kernel_overhead_s": 0.0}
    ).accelerator
    col = np.array(  # a dtype the accelerator has no rate for: an error naming the row
        each_row(
            "--attention",
            source,
            samples,
            lambda s: attention_time_s(*attention_flops(s), unit, s.dtype),
        )
    )
    meas = np.array([s.time_s for s in samples])
    refuse_beyond_peak("--attention", source, col, meas, "FLOP/s")
    if overhead_s is None:
        x, _ = _solve(np.column_stack([col, np.ones_like(col)]), meas)
        overhead_s = max(0.0, float(x[1]))
        part.values[f"{EFF}.kernel_overhead_s"] = overhead_s
    else:
        x, _ = _solve(col[:, None], meas - overhead_s)
    _fraction(part, f"{EFF}.attention", x[0], "attention")
    pred = (
        col / part.values.get(f"{EFF}.attention", system.accelerator.efficiency.attention)
        + overhead_s
    )
    part.residuals.append(
        _residual(source, "fused attention, analytical fallback form", pred, meas)
    )
    return part


def fit_gemm(
    samples: list[GemmSample], system: SystemSpec, source: str, overhead_s: float
) -> FitPart:
    """GEMM efficiency cap (half precision and, when fp8 rows are given, fp8) and the ramp time."""
    part = FitPart()
    unit = with_values(
        system,
        {
            f"{EFF}.gemm": 1.0,
            f"{EFF}.gemm_fp8": 1.0,
            f"{EFF}.gemm_ramp_s": 0.0,
            f"{EFF}.kernel_overhead_s": 0.0,
        },
    ).accelerator

    def row(s: GemmSample) -> tuple[list[float], float]:
        """The row's linear columns (the rate term alone: the traffic floor, gemm_traffic_floor_s, is no
        linear column) and its time at the peak."""
        flops = 2.0 * s.batch * s.m * s.n * s.k
        col = gemm_compute_s(flops, (s.batch, s.m, s.n, s.k), unit, s.dtype)
        at_peak_s = flops / unit.peak_matrix_flops(s.dtype)
        return ([col, 0.0, 1.0] if s.dtype != "fp8" else [0.0, col, 1.0]), at_peak_s

    # a dtype the accelerator has no rate for: an error naming the row
    rows, ideal = zip(*each_row("--gemm", source, samples, row))
    a, m = np.array(rows), np.array([s.time_s for s in samples])
    refuse_beyond_peak("--gemm", source, ideal, m, "FLOP/s")
    x, used = _solve(a, m)
    if used[0]:
        _fraction(part, f"{EFF}.gemm", x[0], "gemm")
    if used[1]:
        _fraction(part, f"{EFF}.gemm_fp8", x[1], "gemm_fp8")
    ramp = float(x[2]) - overhead_s
    if ramp < 0:
        part.notes[f"{EFF}.gemm_ramp_s"] = (
            f"fitted fixed GEMM time {x[2]:.3g} s is below the kernel overhead; ramp set to 0"
        )
    part.values[f"{EFF}.gemm_ramp_s"] = max(0.0, ramp)
    caps = np.array(
        [
            part.values.get(f"{EFF}.gemm", system.accelerator.efficiency.gemm),
            part.values.get(f"{EFF}.gemm_fp8", system.accelerator.efficiency.gemm_fp8 or 1.0),
        ]
    )
    floors = [
        gemm_traffic_floor_s((s.batch, s.m, s.n, s.k), system.accelerator, s.dtype) for s in samples
    ]
    compute = np.maximum(a[:, 0] / caps[0] + a[:, 1] / caps[1], np.array(floors))
    pred = compute + part.values[f"{EFF}.gemm_ramp_s"] + overhead_s
    part.residuals.append(_residual(source, "GEMMs, analytical fallback form", pred, m))
    return part
