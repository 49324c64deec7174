"""``paraplan search``: the fastest plans that fit."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from paraplan.catalog import load_model, load_system
from paraplan.cli.app import (
    Attention,
    CpOption,
    DefaultOverlapOption,
    DefaultPlacementOption,
    Dtype,
    MicroBatchOption,
    NoOffloadOption,
    PpOption,
    RecomputeOption,
    ScheduleOption,
    TpOption,
    ZeroOption,
    _stdout,
    app,
    search_restrictions,
)
from paraplan.specs.errors import InputError
from paraplan.units import GiB


@app.command()
def search(
    model: Annotated[str, typer.Option("--model", "-m", help="catalog name, or a YAML/JSON file (or a Hugging Face config.json)")],
    system: Annotated[str, typer.Option("--system", "-s", help="catalog name, or a YAML/JSON file")],
    gpus: Annotated[int, typer.Option("--gpus", help="total GPUs")],
    seq_length: Annotated[int, typer.Option("--seq-length")] = 2048,
    global_batch: Annotated[Optional[int], typer.Option("--global-batch", help="sequences per step")] = None,
    max_global_batch: Annotated[
        Optional[int],
        typer.Option("--max-global-batch", help="instead of --global-batch: largest multiple of dp·micro_batch not above it"),
    ] = None,
    top: Annotated[int, typer.Option("--top", min=1, help="how many plans to show")] = 10,
    objective: Annotated[str, typer.Option("--objective", help="time | cost | mfu")] = "time",
    dtype: Annotated[Dtype, typer.Option("--dtype")] = Dtype.bf16,
    attention: Annotated[Attention, typer.Option("--attention")] = Attention.flash,
    tp: TpOption = None,
    pp: PpOption = None,
    cp: CpOption = None,
    micro_batch: MicroBatchOption = None,
    recompute: RecomputeOption = None,
    zero: ZeroOption = None,
    schedule: ScheduleOption = None,
    no_offload: NoOffloadOption = False,
    default_overlap: DefaultOverlapOption = False,
    default_placement: DefaultPlacementOption = False,
    price: Annotated[Optional[float], typer.Option("--price", min=0.0, help="USD per GPU-hour for --objective cost")] = None,
    exhaustive: Annotated[bool, typer.Option("--exhaustive", help="evaluate every candidate through the scalar estimator")] = False,
    explain: Annotated[bool, typer.Option("--explain", help="show why the best plan wins over its neighbours")] = False,
    csv_path: Annotated[Optional[Path], typer.Option("--csv", help="write every feasible plan with its metrics")] = None,
    workers: Annotated[int, typer.Option("--workers", min=1, help="processes for --exhaustive")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of tables")] = False,
) -> None:
    """The fastest plans that fit in memory, over every plan knob, exact w.r.t. the cost model."""
    from paraplan.report.search_view import (
        CsvSink,
        explain_table,
        nearest_miss_line,
        plans_table,
        summary_line,
    )
    from paraplan.search.explain import explain as explain_plan
    from paraplan.search.run import exhaustive_search
    from paraplan.search.run import search as run_search
    from paraplan.search.space import SearchProblem

    if gpus <= 0:
        raise InputError(f"--gpus: {gpus} is not allowed; must be a positive integer")
    system_spec = load_system(system, field="system")
    problem = SearchProblem(
        model=load_model(model, field="model"),
        system=system_spec,
        gpus=gpus,
        seq_length=seq_length,
        global_batch=global_batch,
        max_global_batch=max_global_batch,
        dtype=dtype.value,
        attention=attention.value,
        objective=objective,
        **search_restrictions(tp, pp, cp, micro_batch, recompute, zero, schedule),
        vary_offload=not no_offload,
        vary_overlap=not default_overlap,
        vary_placement=not default_placement,
        price_per_gpu_hour=price if price is not None else system_spec.price_per_gpu_hour,
    )
    problem.check()
    from rich.progress import Progress

    sink = CsvSink(csv_path) if csv_path is not None else None
    show_progress = not as_json and (exhaustive or sink is not None) and sys.stderr.isatty()  # long searches
    try:
        with Progress(console=Console(stderr=True), transient=True, disable=not show_progress) as bar:
            task = bar.add_task("searching", total=None)

            def advance(done: int, total: int | None = None) -> None:
                bar.update(task, completed=done, total=total)

            if exhaustive:
                result = exhaustive_search(problem, top_k=top, workers=workers, progress=advance, collect_all=sink is not None)
                if sink is not None:
                    sink.write_plans(result.all_feasible or [], seq_length)
            else:
                result = run_search(problem, top_k=top, workers=workers, progress=advance, feasible_sink=sink)
    finally:
        if sink is not None:
            sink.close()
    written = sink.rows if sink is not None else None
    alternatives = explain_plan(problem, result.plans[0].plan, result.plans[0].estimate) if (explain and result.plans) else []
    if as_json:
        out = result.to_dict()
        if explain and result.plans:
            out["explain"] = [a.__dict__ for a in alternatives]
        if written is not None:
            out["csv_rows"] = written
        print(json.dumps(out, indent=2))
        return
    console = _stdout()
    console.print(f"{problem.model.name} on {gpus} x {system_spec.name}, seq {seq_length}, "
                  + (f"global batch {global_batch}" if global_batch else f"max global batch {max_global_batch}")
                  + f", {dtype.value}, objective {objective}")
    if result.plans:
        console.print(plans_table(result))
    else:
        console.print(nearest_miss_line(result))
    console.print(summary_line(result))
    if written is not None:
        console.print(f"wrote {written:,} feasible plans to {csv_path}")
    if alternatives:
        console.print()
        console.print(explain_table(alternatives, result.plans[0].estimate.step_time_s))
        capacity = system_spec.accelerator.hbm_capacity / GiB
        best_obj = result.plans[0].objective
        for item in result.faster_infeasible:
            from paraplan.report.search_view import plan_label

            gain = 1 - item["objective"] / best_obj if problem.objective != "mfu" else item["objective"] / best_obj - 1
            console.print(f"{gain:.1%} faster but does not fit: {plan_label(item['plan'])} "
                          f"needs {item['peak_memory_gib']:.1f} GiB > {capacity:.0f} GiB")


