"""How well a system with a measured kernel table attached reproduces the table (cost.kernel_tables).

For each file of the table: the relative error of each row priced by the system through the cost
functions (cost.compute: what a step estimate uses; GEMMs less the step-level ramp and without
the in-step share, ``efficiency.table_in_step_share``: both are costs of the step outside the kernel), and the table's leave-one-out interpolation
error (each row priced from the other rows by the same rule: the error on a shape the table has
not measured). Attention rows are their kernel times: a bwd row timed on leaf inputs less their gradients'
accumulation (cost.table_attention.row_kernel_s). Memory copies whose bytes fit in L2 are reported apart (left out of the rate by the
rule in cost.kernel_tables). Named kernels (``kernels``: eager PyTorch norms, activations, adds, casts,
loss, optimizer; ``fp8_kernels``: fp8 quantisation) are priced by the table's interpolant at each row's
shape (cost.kernel_tables.kernel_time_s, what cost.eager_kernels reads) and left out one at a time per op.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from paraplan.cost import kernel_tables as kt
from paraplan.cost.compute import (
    GROUPED_GEMM_STREAMS,
    attention_time_s,
    gemm_kernel_time_s,
    grouped_gemm_time_s,
    memory_time_s,
)
from paraplan.cost.frameworks import as_attention_kernel
from paraplan.cost.table_attention import row_kernel_s, shape_prior
from paraplan.cost.table_interp import leave_one_out
from paraplan.specs.fields import with_fields
from paraplan.specs.system import AcceleratorSpec, SystemSpec


@dataclass(frozen=True)
class TableResidual:
    """Relative errors of one file's rows: ``what`` says which (attached table or leave-one-out)."""

    file: str
    what: str
    points: int
    rms_rel: float
    max_rel: float


def _res(file: str, what: str, pred, meas) -> TableResidual | None:
    """The relative errors of ``pred`` against ``meas``; None where there is no row (a leave-one-out of
    groups of one row each: _loo), which _file_residuals leaves out."""
    if len(meas) == 0:
        return None
    rel = np.asarray(pred, float) / np.asarray(meas, float) - 1.0
    return TableResidual(
        file, what, len(rel), float(np.sqrt(np.mean(rel**2))), float(np.max(np.abs(rel)))
    )


def _loo(
    measured: list[kt.MeasuredRow], floor_s: float | None = None, prior_of=None
) -> tuple[list, list]:
    """Leave-one-out predictions and the measured times, group by group (cost.kernel_tables.groups),
    over the prior ``prior_of(group)`` where given (attention: cost.table_attention.shape_prior); a group of
    one row is left out (no other row predicts it: a user's table with one non-causal row, say)."""
    loo, times = [], []
    for group, (points, works, group_times) in kt.groups(measured).items():
        if len(points) < 2:
            continue
        prior = None if prior_of is None else prior_of(group)
        loo += leave_one_out(points, works, group_times, floor_s, prior)
        times += group_times
    return loo, times


def _gemm(table: kt.KernelTable, acc: AcceleratorSpec | None, kind: str) -> list[TableResidual]:
    file = table.files[kind]
    measured = kt.gemm_rows(table.rows[kind], table.name, file, kind)
    label = "grouped GEMMs (per-expert loop)" if kind == "grouped_gemm" else "GEMMs"
    loo = _res(file, f"{label}, table leave-one-out", *_loo(measured))
    if acc is None:
        return [loo]
    pred = []
    for r in measured:
        p = tuple(int(x) for x in r.point)
        # the kernel's time: the cost function's less the step-level ramp it adds (cost.compute)
        if kind == "grouped_gemm":
            ramps = math.ceil(p[0] / GROUPED_GEMM_STREAMS) * acc.efficiency.gemm_ramp_s
            pred.append(grouped_gemm_time_s(r.work, (p[0], p[1], p[3], p[2]), acc, r.dtype) - ramps)
        else:
            pred.append(gemm_kernel_time_s(r.work, (1, *p), acc, r.dtype))
    return [_res(file, f"{label}, attached table", pred, [r.time_s for r in measured]), loo]


def _library(table: kt.KernelTable, acc: AcceleratorSpec | None, kind: str) -> list[TableResidual]:
    """A library's one-kernel grouped file (cost.table_grouped): left out (floor 0), and priced by the system
    with that implementation (``grouped_gemm_time_s`` less its one ramp): ≥ 2 groups from the table, one group
    by the dense GEMM rule the implementation applies (issue 33), shown apart, and ≥ 2 groups by the analytical
    one-kernel form the system uses without the table (how far that form is from the library's rates)."""
    file = table.files[kind]
    implementation = kind.removeprefix("grouped_gemm_")
    label = f"grouped GEMMs ({implementation}, one kernel)"
    measured = kt.gemm_rows(table.rows[kind], table.name, file, "grouped_gemm", "time_us")
    loo = _res(file, f"{label}, table leave-one-out", *_loo(measured, 0.0))
    if acc is None:
        return [loo]
    acc_i = with_fields(acc, {"efficiency.runtime.grouped_gemm": implementation})
    bare = with_fields(acc_i, {"kernel_tables": None})  # the catalog's analytical one-kernel form
    out = []
    for what, rows, system in (
        ("attached table", [r for r in measured if r.point[0] > 1], acc_i),
        ("one group: the dense GEMM rule", [r for r in measured if r.point[0] == 1], acc_i),
        ("catalog analytical form", [r for r in measured if r.point[0] > 1], bare),
    ):
        pred = [
            grouped_gemm_time_s(r.work, (b, m, n, k), system, r.dtype) - acc.efficiency.gemm_ramp_s
            for r in rows
            for b, m, k, n in [tuple(int(x) for x in r.point)]
        ]
        if rows:
            out.append(_res(file, f"{label}, {what}", pred, [r.time_s for r in rows]))
    return [out[0], loo, *out[1:]]


def _attention(
    table: kt.KernelTable, acc: AcceleratorSpec | None, kind: str
) -> list[TableResidual]:
    kernel = kind.split("_", 1)[1]
    file = table.files[kind]
    label = f"fused attention ({kernel})"
    rows = table.attention[kind]
    prior_of = partial(_attention_prior, kernel)
    if acc is None:  # a table measured on no catalog accelerator: its rows as timed, left out only
        return [_res(file, f"{label}, table leave-one-out", *_loo(rows, 0.0, prior_of))]
    acc_k = as_attention_kernel(acc, kernel)
    # the rows' kernel times: a bwd row timed on leaf q, k, v less their gradients' accumulation
    # (cost.table_attention.row_kernel_s, cost.leaf_grads), what a step's attention is priced from
    times = row_kernel_s(table, kind, acc.hbm_rate())
    measured = [replace(r, time_s=t) for r, t in zip(rows, times)]
    return [
        _res(file, f"{label}, attached table", _priced(acc_k, measured), times),
        _res(file, f"{label}, table leave-one-out", *_loo(measured, 0.0, prior_of)),
        _res(file, f"{label}, catalog analytical form", _analytical(acc_k, measured), times),
    ]


def _attention_prior(kernel: str, group: tuple):
    """The prior of an attention group (head dim, causal, direction, window):
    cost.table_attention.shape_prior."""
    return shape_prior(kernel, group[0], group[1], group[3])


def _analytical(acc: AcceleratorSpec, measured: list[kt.MeasuredRow]) -> list[float]:
    """Each attention row priced by the system's analytical form with no table attached (cost.compute
    attention_time_s: its in-step fraction efficiency.attention, converted to the row's kernel by
    cost.frameworks.as_attention_kernel, shape factor and kernel overhead): how
    far the catalog's form is from the kernel the table measured (issue 32)."""
    return _priced(with_fields(acc, {"kernel_tables": None}), measured)


def _priced(acc: AcceleratorSpec, measured: list[kt.MeasuredRow]) -> list[float]:
    """Each attention row (sequence; head dim, causal, direction, window) priced as a step prices the call
    (cost.compute.attention_time_s, at the accelerator's tables or analytical form)."""
    out = []
    for r in measured:
        (s,), (d, causal, direction, window) = r.point, r.group
        call = (int(s), int(s), d, causal)
        out.append(attention_time_s(r.work, 1.0, acc, r.dtype, call, direction, 0.0, window))
    return out


def _memory(table: kt.KernelTable, acc: AcceleratorSpec | None) -> list[TableResidual]:
    """A memory file: HBM-resident copies attached and left out, L2-resident ones apart; without a
    system (``acc`` None: no L2 size) every row counts as HBM-resident, left out only."""
    file = table.files["memory"]
    pairs = kt.memory_pairs(table.rows["memory"], f"{kt.FIELD}: {table.name}/{file}")
    l2 = acc.l2_cache if acc is not None else None
    hbm = [(b, t) for b, t in pairs if not kt.l2_resident(b, l2)]
    cached = [(b, t) for b, t in pairs if kt.l2_resident(b, l2)]
    floor = min(t for _, t in pairs)
    left = hbm if len(hbm) >= 2 else []  # one row: no other row predicts it
    loo = _res(
        file,
        "memory copies (HBM-resident), table leave-one-out",
        leave_one_out([(b,) for b, _ in left], [b for b, _ in left], [t for _, t in left], floor),
        [t for _, t in left],
    )
    if acc is None:
        return [loo]
    out = [
        _res(
            file,
            "memory copies (HBM-resident), attached table",
            [memory_time_s(b, acc) for b, _ in hbm],
            [t for _, t in hbm],
        ),
        loo,
    ]
    if cached:
        out.append(
            _res(
                file,
                "memory copies (L2-resident, priced as HBM by rule)",
                [memory_time_s(b, acc) for b, _ in cached],
                [t for _, t in cached],
            )
        )
    return out


def _named(table: kt.KernelTable, acc: AcceleratorSpec | None, kind: str) -> list[TableResidual]:
    """A kernels / fp8_kernels file: each row from the interpolant, and per op leave-one-out."""
    prefix = "fp8_" if kind == "fp8_kernels" else ""
    file = table.files[kind]
    measured = kt.kernel_rows(table.rows[kind], table.name, file, prefix)
    label = "fp8 quantisation kernels" if prefix else "named eager kernels"
    loo = _res(file, f"{label}, table leave-one-out", *_loo(measured, 0.0))
    if acc is None:
        return [loo]
    pred = [kt.kernel_time_s(table.name, acc.l2_cache, r.group[0], r.point) for r in measured]
    return [_res(file, f"{label}, attached table", pred, [r.time_s for r in measured]), loo]


def table_residuals(system: SystemSpec) -> list[TableResidual]:
    """Residuals of each file of the system's attached table (module docstring); [] without one."""
    acc = system.accelerator
    if not acc.kernel_tables:
        return []
    # kernel times: the in-step share (a step's cost, cost.compute.table_in_step_share) left out, and no
    # alignment share: a row is the kernel as its benchmark ran it, alignment included (DeepBench's V100
    # rows hold shapes such as 8457 x 35 that cuBLAS ran at full rate, cost.gemm_alignment)
    acc = with_fields(
        acc, {"efficiency.table_in_step_share": {}, "efficiency.aligned_gemms_only": True}
    )
    return _file_residuals(acc.kernel_tables, acc)


def _file_residuals(ref: str, acc: AcceleratorSpec | None) -> list[TableResidual]:
    """Each file of the table ``ref``: priced by ``acc`` with it attached and left out; left out only
    where no system is given (``acc`` None: a table no catalog system was measured on)."""
    table = kt.load_table(ref, acc.l2_cache if acc is not None else None)
    out: list[TableResidual] = []
    for kind in table.files:
        if kind in kt.GEMM_COLUMNS:
            out += _gemm(table, acc, kind)
        elif kind.startswith("attention_"):
            out += _attention(table, acc, kind)
        elif kind.startswith("grouped_gemm_"):
            out += _library(table, acc, kind)
        elif kind == "memory":
            out += _memory(table, acc)
        elif kind in ("kernels", "fp8_kernels"):
            out += _named(table, acc, kind)
    return [r for r in out if r is not None]


def shipped_table_residuals() -> dict[str, tuple[str | None, list[TableResidual]]]:
    """Every shipped table: (the catalog system it is attached to, its residuals); a table is
    attached to the first catalog system whose accelerator it was measured on; one measured on no
    catalog accelerator has None and its leave-one-out residuals alone (_file_residuals)."""
    from paraplan.catalog import load_system, system_names

    out: dict[str, tuple[str | None, list[TableResidual]]] = {}
    for name in kt.shipped_tables():
        accs = kt.table_provenance(name).get("accelerators", [])
        for sys_name in system_names():
            system = load_system(sys_name)
            if system.accelerator.name in accs:
                attached = with_fields(system, {"accelerator.kernel_tables": name})
                out[name] = (sys_name, table_residuals(attached))
                break
        else:
            out[name] = (None, _file_residuals(name, None))
    return out


def _heading(name: str, system: str | None) -> str:
    """A table's heading: the catalog system it is priced on and whether the catalog attaches it by
    default, or that it is attached to no catalog system."""
    from paraplan.catalog import load_system

    if system is None:
        return f"### {name} (not attached to any catalog system: opt-in by name; left out only)"
    by_default = load_system(system).accelerator.kernel_tables == name
    how = "attached by default" if by_default else "opt-in; priced here attached"
    return f"### {name} ({system}: {how})"


def tables_markdown() -> list[str]:
    """The docs/validation.md section on every shipped kernel table: provenance and residuals, each
    table's system saying whether the catalog attaches it by default or it is opt-in (_heading)."""
    lines = [
        "## Kernel tables",
        "",
        (
            "Measured per-shape kernel tables shipped in `catalog/kernels/` (cost.kernel_tables; "
            "`paraplan systems --tables`). Component data only: never fitted to step times. "
            "*Attached table*: each row priced by the catalog system with the table attached, through "
            "the cost functions a step estimate uses; *leave-one-out*: each row priced from the "
            "other rows (error on an unmeasured shape; at the ends of a 1-D sweep this is the "
            "clamped-edge rule). Cache-resident copies (bytes moved ≤ L2) are priced as HBM copies "
            "by rule and shown apart. A table measured on no catalog accelerator is listed with "
            "its leave-one-out rows alone (`accelerator.kernel_tables` attaches it by name)."
        ),
        "",
    ]
    for name, (system, residuals) in shipped_table_residuals().items():
        prov = kt.table_provenance(name)
        lines += [
            _heading(name, system),
            "",
            f"- device: {prov.get('device', '—')}",
            f"- software: {prov.get('software', '—')}",
            f"- date: {prov.get('date', '—')}",
            f"- source: {prov.get('source', '—')}",
            *(f"- {k}: {v}" for k, v in prov.items() if k.endswith("_source")),
            *([f"- catalog: {prov['catalog']}"] if prov.get("catalog") else []),
            "",
            "| file | rows priced | points | RMS % | max % |",
            "|---|---|---:|---:|---:|",
        ]
        lines += [
            f"| {r.file} | {r.what} | {r.points} | {100 * r.rms_rel:.2f} | {100 * r.max_rel:.2f} |"
            for r in residuals
        ]
        lines.append("")
    return lines


def with_tables(system: SystemSpec) -> SystemSpec | None:
    """The system with the shipped table measured on its accelerator attached; None if none is."""
    names = kt.tables_measured_on(system.accelerator.name)
    if not names or system.accelerator.kernel_tables:
        return None
    return with_fields(system, {"accelerator.kernel_tables": names[0]})


def attached_step_errors(cases) -> dict[str, tuple[list[float], list[float]]]:
    """Per case file, the step-time errors (%) of the cases whose system has a shipped table:
    (catalog system as shipped, the same system with the table attached)."""

    from paraplan.validate.case_files import Case
    from paraplan.validate.run import run_case

    out: dict[str, tuple[list[float], list[float]]] = {}
    for case in cases:
        if not isinstance(case, Case) or "step_time_s" not in case.measured:
            continue
        attached = with_tables(case.system)
        if attached is None:
            continue
        before, after = run_case(case), run_case(replace(case, system=attached))
        if before["status"] != "ok" or after["status"] != "ok":
            continue
        errs = out.setdefault(case.file, ([], []))
        errs[0].append(before["error_pct"]["step_time_s"])
        errs[1].append(after["error_pct"]["step_time_s"])
    return out


def attached_markdown(cases) -> list[str]:
    """Why the catalog systems keep the analytical default: step-time MAPE with and without tables."""
    lines = [
        "### Step times with the tables attached",
        "",
        (
            "The catalog systems keep the analytical forms by default: their in-step constants "
            "(validate.fitted) were fitted with them, and attaching the measured tables moves these "
            "cases as below (fp8 cases too fast: a table holds kernels timed alone, and "
            "`torch._scaled_mm` alone runs faster than Transformer Engine's fp8 GEMMs keep in a "
            "step; a system `paraplan calibrate` writes keeps that in-step share, "
            "`efficiency.table_in_step_share`, docs/calibration.md). Tables apply to calibrated "
            "systems and on request (`accelerator.kernel_tables`)."
        ),
        "",
        "| case file | step-time cases | MAPE % as shipped | MAPE % with table |",
        "|---|---:|---:|---:|",
    ]
    for file, (before, after) in attached_step_errors(cases).items():
        mape = [sum(abs(e) for e in errs) / len(errs) for errs in (before, after)]
        lines.append(f"| {file} | {len(before)} | {mape[0]:.2f} | {mape[1]:.2f} |")
    return lines + [""]
