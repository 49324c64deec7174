"""In-step rates: what a kernel timed alone cannot show, and how calibrate keeps it (docs/calibration.md).

The base system's GEMM caps and memory-bound rate are in-step rates: what a framework's kernels keep inside a
training step, the reference its step-fitted constants (validate.fitted) and its profiles' eager traffic
factors (cost.frameworks) were set against. A kernel table times kernels alone, back to back. So a table
replaces a kernel's rate only where it is slower than the base's in-step rate (a step never runs a kernel
faster than the kernel alone); where it is faster, the base's in-step rate stays and the table's rate is
reported as the kernel rate alone.
"""

from __future__ import annotations

from paraplan.calibrate.fit import EFF, cache_resident, with_values
from paraplan.calibrate.fit_gemms import fit_set_ratio, fitted_on
from paraplan.calibrate.readers import GemmSample
from paraplan.cost.compute import gemm_cap_key, gemm_kernel_time_s, memory_time_s
from paraplan.specs.system import SystemSpec

HBM, OVERHEAD = f"{EFF}.hbm", f"{EFF}.kernel_overhead_s"


def memory_ratio(samples: list[tuple[float, float]], base) -> float | None:
    """r = Σ measured time / Σ the base system's time of the same copies (cost.compute.memory_time_s at
    the base's η_hbm and kernel overhead) over the HBM-resident rows (fit.cache_resident); None when
    every row is cache-resident. r < 1: this GPU's copies alone run faster than the base's in-step rate."""
    rows = [s for s, c in zip(samples, cache_resident(samples, base)) if not c]
    if not rows:
        return None
    priced = sum(memory_time_s(b, base.accelerator) for b, _ in rows)
    return sum(t for _, t in rows) / priced


def in_step_ratios(samples: list[GemmSample], base: SystemSpec) -> dict[str, float]:
    """Per GEMM cap (``gemm_cap_key``), r = Σ measured time / Σ the base system's in-step time of the
    same GEMMs, its ``gemm_kernel_time_s`` (gemm_time_s less the step-level ramp, a cost outside the kernel): how this
    GPU's kernels, timed alone, compare with the in-step GEMM rate the base system prices over the
    table's work (r < 1: the kernels alone run faster than a step keeps them; docs/calibration.md)."""
    acc = base.accelerator
    measured: dict[str, float] = {}
    priced: dict[str, float] = {}
    for s in samples:
        key = gemm_cap_key(s.dtype)
        flops = 2.0 * s.batch * s.m * s.n * s.k
        kernel = gemm_kernel_time_s(flops, (s.batch, s.m, s.n, s.k), acc, s.dtype)
        measured[key] = measured.get(key, 0.0) + s.time_s
        priced[key] = priced.get(key, 0.0) + kernel
    return {key: measured[key] / priced[key] for key in measured}


def _hold_in_step(cal, path: str, base: float, slower, why: str) -> None:
    """Keep the slower of the base's in-step value and the fit in ``cal.values[path]`` (the fit is
    reported as the kernel rate alone in ``kernel_caps``)."""
    fitted = cal.values.get(path)
    if fitted is None:
        return
    cal.kernel_caps[path] = float(fitted)
    kept = slower(base, fitted)
    if kept == fitted:
        return
    del cal.values[path]
    cal.system = with_values(cal.system, {path: base})
    cal.notes[path] = (
        f"base in-step value {base:.4g} kept: the kernels alone fit {fitted:.4g}, faster than the "
        f"base's in-step rate ({why}; {cal.notes.get(path, 'fit')})"
    )


def keep_in_step_memory(cal, samples: list[tuple[float, float]]) -> bool:
    """The memory-bound in-step constants: each the slower of the base's and the fit to the copies alone
    (η_hbm = min(base, fit), kernel overhead = max(base, fit)), the fits reported as ``kernel_caps``; returns
    whether the memory table may be attached: only where its copies are no faster than the base's in-step
    rate (``memory_ratio`` r ≥ 1), since a system has no in-step share for memory-bound kernels. Run right
    after the memory fit, so that the later fits (attention, GEMM) use the overhead the system keeps."""
    eff = cal.base.accelerator.efficiency
    for path, base, slower in ((HBM, eff.hbm, min), (OVERHEAD, eff.kernel_overhead_s, max)):
        why = "the rate memory-bound kernels keep in a step, the reference of the profiles' eager traffic factors"
        _hold_in_step(cal, path, base, slower, why)
    r = memory_ratio(samples, cal.base)
    return r is not None and r >= 1.0


def keep_in_step_overhead(cal) -> bool:
    """The kernel overhead fitted to an attention table (no memory table given) held the same way:
    max(base, fit); returns whether the base's value was kept (the attention rows are then refitted
    with it)."""
    why = (
        "the per-kernel cost a step keeps; a step never runs a kernel faster than the kernel alone"
    )
    _hold_in_step(cal, OVERHEAD, cal.base.accelerator.efficiency.kernel_overhead_s, max, why)
    return OVERHEAD not in cal.values


def _attached_ratio(cal, key: str, rows_r: float) -> tuple[float, str]:
    """r for an attached table's share: over the GEMMs of the steps the base's cap was fitted on
    (calibrate.fit_gemms.fit_set_ratio), where the base's in-step rate is known; over the table's rows
    (``rows_r``) where the base carries no fitted cap with such steps."""
    r = fit_set_ratio(cal.system, cal.base, key)
    if r is None:
        return rows_r, "over the table's rows"
    files = ", ".join(fitted_on(cal.base.name, key))
    where = f"over the GEMMs of the steps the base's cap was fitted on ({files})"
    return r, f"{where}; over the table's rows {rows_r:.4g}"


def keep_in_step_shares(cal, samples: list, attached: bool) -> None:
    """A GEMM table times kernels alone; the base system's GEMM caps are a kernel cap × an in-step share fitted
    to step times (docs/model.md §2, §6), which no kernel table shows. With r the table's time over the base's
    in-step time for the same GEMMs (``in_step_ratios``), per cap:

    - attached, the table's GEMM times are divided by the in-step share s = min(1, r), r taken over the GEMMs
      of the steps the base's cap was fitted on where it has such a cap (``_attached_ratio``)
      (``efficiency.table_in_step_share``, cost.compute) and the base cap is kept: the table prices every GEMM
      of its dtypes (bf16 grouped GEMMs per expert from its dense rows, cost.kernel_tables), the cap only the
      dtypes it did not measure (fp32, tf32, FP4; fp8 grouped GEMMs with the base's grouped share);
    - not attached, the cap prices the table's dtypes: B·min(1, 1/r), the slower of the base's in-step rate
      and this GPU's kernels alone."""
    updates = {}
    dtypes = {
        gemm_cap_key(s.dtype): s.dtype for s in samples
    }  # a dtype the table measured, per cap
    for key, r in in_step_ratios(samples, cal.base).items():
        path = f"{EFF}.{key}"
        dtype = dtypes[key]
        base = cal.base.accelerator.gemm_efficiency_cap(dtype)
        fitted = cal.values.pop(path, None)
        if fitted is not None:
            cal.kernel_caps[path] = float(fitted)
        fit_text = f"{fitted:.4g}" if fitted is not None else "not identified"
        if attached:
            share_path = f"{EFF}.table_in_step_share.{key}"
            r, over = _attached_ratio(cal, key, r)
            updates[share_path] = cal.values[share_path] = min(1.0, r)
            cal.notes[share_path] = (
                f"in-step share of the attached table's {dtype} GEMMs: min(1, r), r = {r:.4g} {over}"
            )
            updates[path] = base
            cal.notes[path] = (
                f"base in-step cap {base:.4g} kept: the attached table prices the {dtype} GEMMs it "
                f"measured (r = {r:.4g}); the cap prices the dtypes it did not (kernel cap fitted to "
                f"the table: {fit_text})"
            )
            continue
        updates[path] = cal.values[path] = base * min(1.0, 1.0 / r)
        cal.notes[path] = (
            f"in-step cap: base {base:.4g} x min(1, 1/r), r = {r:.4g} the table's {dtype} GEMM time "
            f"over the base's in-step time for them (kernel cap fitted to the table: {fit_text})"
        )
    cal.system = with_values(cal.system, updates)
