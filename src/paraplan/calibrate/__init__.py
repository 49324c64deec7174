"""``paraplan calibrate``: fit a system's constants to the user's measurements and write a system
YAML with provenance, the fit's residuals and a leave-one-out error on measured step times.

Order: memory-bound kernels (η_hbm, kernel overhead) -> fused attention (η_att) -> GEMMs (cap,
ramp) -> collectives (η and α of both tiers) -> step times (overlap costs), each stage on the
system as fitted so far (docs/calibration.md).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from paraplan.calibrate.fit import (
    EFF,
    FitPart,
    Residual,
    fit_attention,
    fit_gemm,
    fit_memory,
    fit_network,
    with_values,
)
from paraplan.calibrate.in_step import (
    OVERHEAD,
    keep_in_step_memory,
    keep_in_step_overhead,
    keep_in_step_shares,
)
from paraplan.calibrate.readers import (
    read_attention_table,
    read_gemm_table,
    read_memory_table,
    read_nccl_tests,
)
from paraplan.calibrate.steps import StepRun, fit_steps
from paraplan.calibrate.tables import (
    Measured,
    attach,
    attention_kernel_of,
    table_residuals,
    with_attention_kernel,
)
from paraplan.catalog import load_model
from paraplan.cost.frameworks import as_attention_kernel
from paraplan.io.fields import Doc, refuse
from paraplan.io.documents import read_document
from paraplan.io.terminal import printable
from paraplan.specs.errors import InputError
from paraplan.specs.fields import get_in
from paraplan.specs.system import SystemSpec


@dataclass
class Calibration:
    base: SystemSpec
    system: SystemSpec
    values: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    residuals: list[Residual] = field(default_factory=list)
    kernel_caps: dict[str, float] = field(default_factory=dict)  # GEMM kernel caps a table fits
    leave_one_out: dict | None = None
    inputs: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "base_system": self.base.name,
            "system": self.system.name,
            "fitted": {k: {"value": v, "base": _get(self.base, k)} for k, v in self.values.items()},
            "notes": self.notes,
            "kernel_caps": self.kernel_caps,
            "residuals": [r.__dict__ for r in self.residuals],
            "leave_one_out": self.leave_one_out,
            "inputs": self.inputs,
        }


def _get(system: SystemSpec, path: str):
    """The value at a dotted path of the system, or None where it has none (a key of a mapping)."""
    return get_in(system.model_dump(), path.split("."))


def read_steps(path: Path) -> list[StepRun]:
    """Measured steps: YAML/JSON ``{model: NAME|FILE, runs: [{name, plan: {...}, step_time_s}]}``
    (a run may carry its own ``model``); plans may also be ``plan_file`` references (FILE#rank)."""
    from paraplan.specs.plan_fields import plan_from_fields

    data = Doc(read_document(path, "--steps"), "--steps")
    runs = data.docs("runs", [])
    if not runs:
        raise InputError(
            f"--steps: {str(path)!r} must hold 'runs: [{{name, plan, step_time_s}}, ...]'"
        )
    out = []
    for i, run in enumerate(runs):
        where = run.where
        model_ref = run.get("model", data.get("model", None))
        if model_ref is None:
            raise InputError(f"{where}: no model (give 'model' at the top or in the run)")
        if not isinstance(model_ref, (str, dict)):
            raise refuse(
                f"{where}.model",
                model_ref,
                "give a catalog name, a file or a mapping of model fields",
            )
        model = load_model(model_ref, field=f"{where}.model", referenced=True)
        time_s = run.number("step_time_s", positive=True)
        if "plan_file" in run:
            plan = _referenced_plan(path, run.text("plan_file"), model, f"{where}.plan_file")
        else:
            plan = plan_from_fields(run.doc("plan", {}).data)
        name = run.get("name", f"run{i + 1}")
        out.append(StepRun(str(name), model, plan, float(time_s)))
    return out


def _referenced_plan(steps_path: Path, ref: str, model, field: str):
    """The plan a steps file names (``FILE`` or ``FILE#RANK``, relative to the steps file): the
    file resolved and checked first (io.referenced.referenced_path: a regular file within the size
    cap), and a plan that does not load reported by path and reason only, never by content."""
    from paraplan.export.planfile import load_plan, split_ref
    from paraplan.io.referenced import referenced_path

    file, rank = split_ref(ref)
    checked = referenced_path(steps_path.parent, str(file), field)
    try:
        return load_plan(str(checked), rank, model=model, field=field)
    except InputError as exc:
        reasons = "; ".join(dict.fromkeys(v.rule for v in exc.violations)) or "not a plan file"
        raise InputError(
            f"{field}: {str(checked)!r} is not a valid plan ({reasons}); its content is not shown"
            " because a document named it: give it on the command line to see each field",
            exc.violations,
        ) from None


def _merge(cal: Calibration, part: FitPart, source: str) -> None:
    cal.values.update(part.values)
    cal.notes.update(part.notes)
    cal.residuals += part.residuals
    for path in part.values:
        cal.notes.setdefault(path, f"fitted from {source}")
    cal.system = with_values(cal.system, part.values)


def keep_step_ramp(cal: Calibration) -> None:
    """A GEMM is priced as kernel time + ``gemm_ramp_s``, a cost of the step outside the kernel
    (cost.compute.gemm_time_s: launch gaps, dependent-kernel bubbles) that a table of kernels timed
    alone cannot show: the base system's ramp is kept, not the fixed time fitted to the table."""
    path = f"{EFF}.gemm_ramp_s"
    fitted = cal.values.pop(path, None)
    base = cal.base.accelerator.efficiency.gemm_ramp_s
    cal.system = with_values(cal.system, {path: base})
    cal.notes[path] = (
        f"base value {base:.3g} s kept: a step-level cost outside the kernel, which kernels timed "
        f"alone do not show (the table's own fixed time, {fitted or 0:.3g} s, is in its rows)"
    )


def keep_base_attention(cal: Calibration) -> None:
    """With the attention table attached, every bf16 call of its kernel is priced from the table;
    the analytical fraction then prices only what the table did not measure: fp32 / tf32 attention
    (another kernel, cost.compute.attention_time_s) and, through a profile's kernel ratio, other
    kernel families. A fit to one bf16 kernel's rows measures neither, so the base fraction is kept
    (converted to the table's kernel: cost.frameworks.as_attention_kernel)."""
    path = f"{EFF}.attention"
    fitted = cal.values.pop(path, None)
    kernel = cal.system.accelerator.efficiency.attention_kernel
    kept = as_attention_kernel(cal.base.accelerator, kernel).efficiency.attention
    cal.system = with_values(cal.system, {path: kept})
    cal.notes[path] = (
        f"base fraction kept ({kept:.3g} for {kernel}): the attached table prices the bf16 calls it "
        f"measured; the fraction fitted to its rows ({fitted or 0:.3g}) is no measurement of the "
        "fp32 / tf32 path or of other kernels, which the fraction prices"
    )


def _fit_attention(cal: Calibration, rows: list, source: str, overhead: float | None) -> None:
    """Fit the attention rows (calibrate.fit.fit_attention) at the overhead the memory table left; with
    none, the overhead they fit is held to the base's in-step value (calibrate.in_step) and, where the
    base's is kept, the attention fraction is refitted at it, so the system prices its rows as fitted."""
    part = fit_attention(rows, cal.system, source, overhead)
    if overhead is None:
        _merge(cal, FitPart(values={OVERHEAD: part.values.pop(OVERHEAD)}), source)
        if keep_in_step_overhead(cal):
            overhead = cal.system.accelerator.efficiency.kernel_overhead_s
            part = fit_attention(rows, cal.system, source, overhead)
    _merge(cal, part, source)


def _attach_tables(
    cal: Calibration, measured: Measured, tables_dir: Path | None, attach_memory: bool
) -> bool:
    """Attach the measured tables calibrate was given (calibrate.tables.attach: only their kinds), the
    copies only where no faster than the base's in-step memory rate (``attach_memory``,
    calibrate.in_step.keep_in_step_memory), and record the attached tables' residuals; returns whether
    any table was attached."""
    if measured.memory and not attach_memory:
        cal.notes["accelerator.kernel_tables (memory)"] = (
            f"{measured.memory[0].name} not attached: its copies alone run faster than the base's "
            "in-step memory rate, and a system has no in-step share for memory-bound kernels"
        )
    to_attach = Measured(
        measured.gemm, measured.attention, measured.memory if attach_memory else None
    )
    if not to_attach.any():
        return False
    cal.system, part, attached = attach(cal.system, cal.base, to_attach, tables_dir)
    if measured.attention and attached:
        keep_base_attention(cal)
    part.residuals = table_residuals(cal.system)
    _merge(cal, part, "kernel tables")
    return attached


def calibrate(
    base: SystemSpec,
    *,
    nccl: list[str] = (),
    gemm: Path | None = None,
    attention: Path | None = None,
    memory: Path | None = None,
    steps: Path | None = None,
    name: str | None = None,
    domain_spans_nodes: bool = False,
    tables_dir: Path | None = None,
    fit_in_step_share: bool = False,
) -> Calibration:
    """Fit what the given measurements identify; everything else keeps the base system's value.
    Kernel tables given are attached to the system (calibrate.tables; written to ``tables_dir``
    unless they are a shipped table's files) before collectives and step times are fitted; with
    ``fit_in_step_share`` the step times also fit the in-step GEMM shares (calibrate.steps)."""
    if not (nccl or gemm or attention or memory or steps):
        raise InputError(
            "calibrate: nothing to fit; give --nccl, --gemm, --attention, --memory or --steps"
        )
    cal = Calibration(base=base, system=base)
    measured = Measured()
    overhead, attach_memory = None, False
    if memory is not None:
        measured.memory = (memory, read_memory_table(memory))
        _merge(cal, fit_memory(measured.memory[1], cal.system, memory.name), memory.name)
        attach_memory = keep_in_step_memory(cal, measured.memory[1])
        cal.inputs.append(str(memory))
        overhead = cal.system.accelerator.efficiency.kernel_overhead_s
    if attention is not None:
        measured.attention = (attention, read_attention_table(attention))
        kernel = attention_kernel_of(attention, base.accelerator.efficiency.attention_kernel)
        if kernel != base.accelerator.efficiency.attention_kernel:
            cal.system = with_attention_kernel(cal.system, kernel)
            cal.notes[f"{EFF}.attention_kernel"] = (
                f"{kernel}: the kernel {attention.name} measured (base: "
                f"{base.accelerator.efficiency.attention_kernel})"
            )
        _fit_attention(cal, measured.attention[1], attention.name, overhead)
        cal.inputs.append(str(attention))
        overhead = cal.system.accelerator.efficiency.kernel_overhead_s
    if gemm is not None:
        if overhead is None:
            cal.notes[f"{EFF}.kernel_overhead_s"] = (
                "base value kept (no memory or attention table); GEMM ramp = fixed time − it"
            )
            overhead = cal.system.accelerator.efficiency.kernel_overhead_s
        measured.gemm = (gemm, read_gemm_table(gemm))
        _merge(cal, fit_gemm(measured.gemm[1], cal.system, gemm.name, overhead), gemm.name)
        cal.inputs.append(str(gemm))
    attached = _attach_tables(cal, measured, tables_dir, attach_memory)
    if measured.gemm:
        keep_step_ramp(cal)
        keep_in_step_shares(cal, measured.gemm[1], attached)
    if nccl:
        runs = [read_nccl_tests(ref) for ref in nccl]
        _merge(
            cal,
            fit_network(runs, cal.system, domain_spans_nodes),
            ", ".join(Path(r.source).name for r in runs),
        )
        cal.inputs += [r.source for r in runs]
    if steps is not None:
        part, loo = fit_steps(read_steps(steps), cal.system, steps.name, fit_in_step_share)
        _merge(cal, part, steps.name)
        cal.leave_one_out = loo
        cal.inputs.append(str(steps))
    cal.system = cal.system.model_copy(update={"name": name or f"{base.name}-calibrated"})
    return cal


def system_yaml(cal: Calibration) -> str:
    """The calibrated system as a loadable YAML: provenance and residuals as comments and ``sources``;
    user text in a comment (run names, file names, notes) with its control characters escaped
    (io.terminal.printable), so a newline in a name cannot end the comment (issue 37)."""
    stamp = _dt.date.today().isoformat()
    data = cal.system.model_dump(mode="json")
    data["name"] = cal.system.name
    data["source"] = (
        f"{cal.base.name} calibrated by paraplan calibrate on {stamp} from: "
        + ", ".join(Path(i).name for i in cal.inputs)
    )
    sources = dict(cal.base.sources)
    for path, value in cal.values.items():
        sources[path] = (
            f"paraplan calibrate {stamp}: {cal.notes.get(path, 'fitted')}; base {_get(cal.base, path)!r} -> {value:.6g}"
        )
    data["sources"] = sources
    lines = [
        f"# Calibrated system written by `paraplan calibrate` ({stamp}); base system: {printable(cal.base.name)}",
        "# Fit residuals (relative error of each input's rows under the fitted constants):",
    ]
    for r in cal.residuals:
        lines.append(
            f"#   {printable(r.source)}: {printable(r.what)}: {r.points} points, RMS {r.rms_rel:.2%}, max {r.max_rel:.2%}"
        )
    for path, note in sorted(cal.notes.items()):
        if path not in cal.values:
            lines.append(f"# {path}: {printable(note)}")
    if cal.leave_one_out and cal.leave_one_out.get("runs"):
        loo = cal.leave_one_out
        lines.append(
            f"# Leave-one-out step-time error: mean {loo['mean_abs_error']:.2%}, max {loo['max_abs_error']:.2%}"
        )
        for row in loo["runs"]:
            lines.append(
                f"#   {printable(row['run'])}: measured {row['measured_s']:.4f} s, predicted {row['predicted_s']:.4f} s ({row['error']:+.2%})"
            )
    return "\n".join(lines) + "\n" + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
