"""``paraplan validate``: predictions against published measurements."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from paraplan.cli.app import _stdout, app
from paraplan.cli.declare import optional, switch
from paraplan.cli.options import JsonOption
from paraplan.specs.errors import InputError

if TYPE_CHECKING:
    from paraplan.report.text_table import SimpleTable

_METRIC_LABELS = {
    "step_time_s": "step time (s)",
    "weights_and_optimizer_gib": "weights+opt (GiB)",
    "activations_gib": "activations (GiB)",
    "peak_memory_gib": "peak (GiB)",
    "peak_allocated_gib": "allocator peak (GiB)",
    "peak_reserved_gib": "allocator reserved (GiB)",
}


def _simple_table(*args, **kwargs) -> SimpleTable:
    """report.text_table.simple_table, imported when a table is drawn (`paraplan --help` stays light)."""
    from paraplan.report.text_table import simple_table

    return simple_table(*args, **kwargs)


_LAYERS_MARK = " †"
_LAYERS_NOTE = (
    "† transformer layers of stage 0 only (Korthikanti et al. 2022 Figure 1 scope; "
    "whole-stage values are in --json as stage_*_gib)"
)


def _validation_table(report: dict) -> SimpleTable:
    table = _simple_table(
        "Predicted vs measured",
        "case",
        "metric",
        "predicted",
        "measured",
        "error %",
        numeric_from=2,
    )
    for entry in report["cases"]:
        if entry["status"] != "ok":
            table.add_row(entry["name"], "unsupported", "-", "-", "-")
            continue
        for metric, measured in entry["measured"].items():
            layers = entry["scope"] == "transformer_layers" and metric in (
                "weights_and_optimizer_gib",
                "activations_gib",
            )
            table.add_row(
                entry["name"],
                _METRIC_LABELS[metric] + (_LAYERS_MARK if layers else ""),
                f"{entry['predicted'][metric]:.3f}",
                f"{measured:.3f}",
                f"{entry['error_pct'][metric]:+.2f}",
            )
    return table


def _summary_table(summary: dict) -> SimpleTable:
    table = _simple_table("Summary", "metric", "cases", "MAPE %")
    for metric, label in _METRIC_LABELS.items():
        if summary.get(f"{metric}_cases"):
            table.add_row(
                label, str(summary[f"{metric}_cases"]), f"{summary[f'{metric}_mape_pct']:.2f}"
            )
    for file, group in summary["by_source"].items():
        mape = group.get("step_time_s_mape_pct")
        table.add_row(
            f"{file}: step time",
            str(group["step_time_cases"]),
            "-" if mape is None else f"{mape:.2f}",
        )
        for metric, what in (("peak_allocated", "allocator peak"), ("peak_reserved", "reserved")):
            if group.get(f"{metric}_gib_mape_pct") is not None:
                table.add_row(
                    f"{file}: {what}",
                    str(group[f"{metric}_gib_cases"]),
                    f"{group[f'{metric}_gib_mape_pct']:.2f}",
                )
    for role in ("calibration", "held_out"):
        mape = summary[role].get("step_time_s_mape_pct")
        if summary[role]["step_time_cases"]:
            table.add_row(
                f"{role.replace('_', '-')} cases: step time",
                str(summary[role]["step_time_cases"]),
                f"{mape:.2f}",
            )
    if summary.get("unsupported"):
        table.add_row("unsupported (not scored)", str(summary["unsupported"]), "-")
    if summary.get("max_abs_error_pct") is not None:
        table.add_section()
        table.add_row(
            f"max |error|: {summary['max_abs_error_case']}, {_METRIC_LABELS[summary['max_abs_error_metric']]}",
            "",
            f"{summary['max_abs_error_pct']:.2f}",
        )
    return table


def _group_table(groups: dict) -> SimpleTable:
    """Per group of heterogeneous cases: our step-time MAPE beside the reference tool's, and OOM trials."""
    table = _simple_table(
        "By group",
        "group",
        "timed cases",
        "MAPE %",
        "reference MAPE %",
        "did not run",
        "predicted not to fit",
        numeric_from=1,
    )
    for name, g in groups.items():
        ref = (
            ", ".join(
                f"{k.removesuffix('_predicted_s')} {v:.1f}"
                for k, v in g["reference_mape_pct"].items()
                if v is not None
            )
            or "-"
        )
        mape = g["step_time_s_mape_pct"]
        table.add_row(
            name,
            str(g["step_time_cases"]),
            "-" if mape is None else f"{mape:.1f}",
            ref,
            str(g["oom_cases"]),
            str(g["oom_predicted_not_to_fit"]),
        )
    return table


def _cv_table(cv: dict) -> SimpleTable:
    table = _simple_table(
        "Leave-one-group-out cross-validation (step time)",
        "held-out group",
        "cases",
        "in-sample MAPE %",
        "CV MAPE %",
        numeric_from=1,
    )
    for group, row in cv["groups"].items():
        table.add_row(
            group,
            str(row["cases"]),
            f"{row['in_sample_step_time_mape_pct']:.2f}",
            f"{row['cv_step_time_mape_pct']:.2f}",
        )
    if cv["cv_step_time_mape_pct"] is not None:
        table.add_section()
        table.add_row("all groups", str(len(cv["cases"])), "", f"{cv['cv_step_time_mape_pct']:.2f}")
    return table


def _coverage_table(coverage: dict) -> SimpleTable:
    """The held-out coverage of the error bands (validate.coverage), overall, per stack and per group."""
    table = _simple_table(
        f"Error bands on held-out groups ({coverage['claimed_pct']} % claimed)",
        "cases of",
        "cases",
        "covered",
        "coverage %",
        numeric_from=1,
    )

    def row(label: str, r: dict) -> None:
        pct = "-" if r["coverage_pct"] is None else f"{r['coverage_pct']:.1f}"
        table.add_row(label, str(r["cases"]), str(r["covered"]), pct)

    for name, r in coverage["by_group"].items():
        row(name, r)
    table.add_section()
    for name, r in coverage["by_stack"].items():
        row(f"stack {name}", r)
    row("all held-out groups", coverage)
    return table


@app.command()
def validate(
    cases: optional(
        list[Path], "--cases", help="case file (JSON/YAML); repeat for more; default: bundled cases"
    ) = None,
    as_json: JsonOption = False,
    max_mape: optional(
        float, "--max-mape", help="exit 1 when any MAPE in the summary exceeds this (%)", min=0.0
    ) = None,
    markdown: optional(Path, "--markdown", help="also write the report as Markdown here") = None,
    hetero: switch(
        "--hetero",
        help="heterogeneous-cluster / per-stage-plan cases (AMP's trials; docs/heterogeneous.md)",
    ) = False,
    cv: switch(
        "--cv",
        help="leave-one-group-out cross-validation: refit the fitted constants without each group (with --hetero: AMP's two clusters)",
    ) = False,
    goodput: switch(
        "--goodput",
        help="published failure, checkpoint and effective-training-time figures (docs/goodput.md); "
        "exit 1 when one is not reproduced",
    ) = False,
) -> None:
    """Compare predictions with published measurements (layer-scope rule: see docs/validation.md)."""
    if goodput:
        from paraplan.cli.goodput_opts import validate_goodput

        validate_goodput(cases, as_json)
        return
    from paraplan.validate.case_files import load_cases
    from paraplan.validate.hetero import is_hetero_file, load_hetero_cases, run_hetero_cases
    from paraplan.validate.markdown import validation_markdown
    from paraplan.validate.run import run_cases

    hetero = hetero or bool(cases) and all(is_hetero_file(p) for p in cases)
    loaded = load_hetero_cases(cases) if hetero else load_cases(cases)
    report = run_hetero_cases(loaded) if hetero else run_cases(loaded)
    if cv:
        from paraplan.cli.app import progress_bar, want_progress
        from paraplan.validate.cv import cross_validate, cross_validate_hetero

        with progress_bar(
            want_progress()
        ) as bar:  # a transient bar with an ETA: terminal, or asked
            task = bar.add_task("cross-validation", total=None)

            def advance(group: str, done: int, total: int) -> None:
                bar.update(
                    task,
                    completed=done,
                    total=total,
                    description=f"refitting without {group}" if group else "done",
                )

            report["cross_validation"] = (cross_validate_hetero if hetero else cross_validate)(
                loaded, progress=advance
            )
    if not hetero:
        from paraplan.validate.coverage import with_bands

        with_bands(report, loaded)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        console = _stdout()
        console.print(_validation_table(report))
        if any(e.get("scope") == "transformer_layers" for e in report["cases"]):
            console.print(_LAYERS_NOTE)
        console.print()
        console.print(_summary_table(report["summary"]))
        if hetero and "by_group" in report["summary"]:
            console.print(_group_table(report["summary"]["by_group"]))
        for item in report["summary"].get("unsupported_cases", []):
            console.print(f"unsupported: {item['name']}: {item['reason']}")
        if cv:
            console.print(_cv_table(report["cross_validation"]))
        if report["summary"].get("band_coverage"):
            console.print(_coverage_table(report["summary"]["band_coverage"]))
    if markdown is not None:
        try:
            markdown.write_text(validation_markdown(report, None if hetero else loaded))
        except OSError as exc:
            raise InputError(
                f"--markdown: cannot write {str(markdown)!r}: {exc.strerror}"
            ) from None
    if max_mape is not None:
        failure = mape_gate_failure(report, max_mape)
        if failure:
            print(f"validation failed: {failure}", file=sys.stderr)
            raise typer.Exit(1)


def mape_gate_failure(report: dict, max_mape: float) -> str | None:
    """Why the ``--max-mape`` gate fails, or None when it passes. It fails when there is nothing to
    judge (no case, no MAPE value), when any MAPE or error is not a finite number (a NaN
    measurement compares false with everything, so it must not slip through), or when any MAPE
    exceeds ``max_mape``."""
    import math

    from paraplan.validate.run import summary_mapes

    mapes = summary_mapes(report["summary"])
    if not report.get("cases") or not mapes:
        return "no case was compared, so the --max-mape gate has nothing to pass"
    errors = [e for case in report["cases"] for e in (case.get("error_pct") or {}).values()]
    bad = [k for k, v in mapes.items() if not isinstance(v, (int, float)) or not math.isfinite(v)]
    if bad or not all(isinstance(e, (int, float)) and math.isfinite(e) for e in errors):
        return f"a MAPE or an error is not a finite number ({', '.join(bad) or 'a case error'}); check the measurements"
    over = {k: v for k, v in mapes.items() if v > max_mape}
    if over:
        worst = max(over, key=over.get)
        return f"{len(over)} MAPE value(s) exceed {max_mape}% (worst {worst} = {over[worst]:.2f}%)"
    return None
