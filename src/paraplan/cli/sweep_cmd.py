"""``paraplan sweep`` and ``paraplan plot``: design-space exploration."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from paraplan.cli.app import (
    Attention,
    Dtype,
    FrameworkOption,
    _stdout,
    app,
    explicit_options,
    load_framework_option,
)
from paraplan.cli.declare import given, optional, switch
from paraplan.cli.goodput_opts import (
    GoodputChanges,
    GoodputOption,
)
from paraplan.cli.options import (
    AttentionOption,
    DtypeOption,
    ModelOption,
    SearchAxes,
    SearchBatch,
    SpaceSwitches,
    TokensOption,
    option_groups,
)
from paraplan.io.options import parse_tokens
from paraplan.specs.errors import InputError
from paraplan.specs.limits import MAX_TOP


def _split_systems(values: list[str]) -> tuple[str, ...]:
    """The systems of repeated or comma-separated --system options (SweepConfig.check refuses none)."""
    return tuple(v.strip() for text in values for v in text.split(",") if v.strip())


@app.command()
@option_groups
def sweep(
    ctx: typer.Context,
    model: ModelOption,
    system: given(
        list[str],
        "--system",
        "-s",
        help="catalog name or file; repeat or comma-separate for several",
    ),
    gpus: given(str, "--gpus", help="GPU counts: 512,1024,2048 or a geometric range 256..16384x2"),
    set_: optional(
        list[str],
        "--set",
        help="sweep a numeric system field (accelerator.hbm_bandwidth=2TB/s,4TB/s) or model field "
        "(model.hidden=...); repeat for more axes",
    ) = None,
    batch: SearchBatch = SearchBatch(),
    top: given(int, "--top", help="plans kept per point (top-k summary)", min=1, max=MAX_TOP) = 5,
    out: given(Path, "--out", help="output directory") = Path("sweep-out"),
    workers: given(int, "--workers", help="local processes (1 = in this process)", min=1) = 1,
    resume: switch("--resume", help="skip the points already finished in OUT/points.jsonl") = False,
    force: switch(
        "--force", help="replace the results in a non-empty OUT (default: refuse)"
    ) = False,
    dask: optional(
        str, "--dask", help="run on a Dask scheduler at ADDRESS, or 'local' for a LocalCluster"
    ) = None,
    objective: given(str, "--objective", help="time | cost | mfu") = "time",
    dtype: DtypeOption = Dtype.bf16,
    attention: AttentionOption = Attention.flash,
    axes: SearchAxes = SearchAxes(),
    switches: SpaceSwitches = SpaceSwitches(),
    tokens: TokensOption = None,
    no_plot: switch("--no-plot", help="write sweep.json/csv only") = False,
    framework: FrameworkOption = None,
    goodput: GoodputOption = False,
    goodput_changes: GoodputChanges = GoodputChanges(),
) -> None:
    """Search the best plan at every point of systems × GPU counts × --set values; write JSON, CSV and plots."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from paraplan.sweep.params import parse_gpus, parse_sets
    from paraplan.sweep.run import SweepConfig, run_sweep

    restrictions = axes.restrictions()
    profile = load_framework_option(framework)  # an unknown name is one line before anything runs
    attention_value = attention.value
    if profile is not None and "attention" not in explicit_options(ctx, ("attention",)):
        attention_value = profile.attention
    config = SweepConfig(
        model=model,
        systems=_split_systems(system),
        gpus=parse_gpus(gpus),
        sets=tuple(parse_sets(set_ or [])),
        **asdict(batch),
        top=top,
        dtype=dtype.value,
        attention=attention_value,
        objective=objective,
        **asdict(switches),
        restrictions={k: v for k, v in restrictions.items() if v is not None},
        tokens=parse_tokens(tokens) if tokens is not None else None,
        framework=framework,
        goodput=goodput_changes.sweep_inputs(goodput),
    )
    if dask is not None and not dask.strip():
        raise InputError("--dask: give a scheduler address (tcp://host:8786) or 'local'")
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("points"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    from paraplan.cli.app import stderr_console, want_progress  # `paraplan --help` loads no rich

    bar = Progress(*columns, console=stderr_console(), transient=True, disable=not want_progress())
    task = bar.add_task("sweep", total=None)

    def started(
        total: int, skipped: int
    ) -> None:  # after the inputs are checked: errors stay one line
        note = f" ({skipped} already done)" if skipped else ""
        bar.update(task, total=total, completed=skipped, description=f"sweep{note}")
        bar.start()

    def finished(record: dict) -> None:
        bar.advance(task)

    try:
        outcome = run_sweep(
            config,
            out,
            workers=workers,
            resume=resume,
            dask=dask,
            on_point=finished,
            on_start=started,
            plots=not no_plot,
            force=force,
        )
    except KeyboardInterrupt:
        bar.stop()
        print(
            f"interrupted: the finished points are in {out / 'points.jsonl'}; add --resume to continue",
            file=sys.stderr,
        )
        raise typer.Exit(130) from None
    finally:
        bar.stop()
    for warning in outcome.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    console = _stdout()
    from paraplan.report.sweep_view import sweep_table

    console.print(sweep_table(outcome.document))
    skipped = f", {outcome.skipped} resumed from {out / 'points.jsonl'}" if outcome.skipped else ""
    console.print(
        f"{outcome.ran} points searched{skipped}; wrote {', '.join(str(f) for f in outcome.files)}"
    )


@app.command()
def plot(
    results: Annotated[Path, typer.Argument(help="a sweep.json written by paraplan sweep")],
    out: optional(Path, "--out", help="output directory (default: beside sweep.json)") = None,
) -> None:
    """Re-draw the plots of a saved sweep (PNG and SVG)."""
    from paraplan.report.plots import plot_sweep
    from paraplan.sweep.results import load_results

    document = load_results(results)
    try:
        files = plot_sweep(document, out if out is not None else results.parent)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(
            f"sweep.json: {str(results)!r} is not a complete paraplan sweep result ({exc!r})"
        ) from None
    print(f"wrote {', '.join(str(f) for f in files)}")
