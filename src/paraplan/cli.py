"""Command line: ``paraplan estimate | models | systems | validate``.

The typer application is ``app`` (other commands, e.g. ``search``, register on it). ``main()`` is
the console entry point: it runs ``app`` without typer's standalone error handling so that every
input problem ends as ONE line on stderr, ``error: <message>``, with exit code 2 (usage errors,
:class:`~paraplan.specs.errors.InputError`, :class:`~paraplan.units.UnitError` and pydantic
``ValidationError``), and no traceback.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from pydantic import ValidationError
from rich.console import Console
from paraplan.report.render import SimpleTable

from paraplan.api import plan_from_fields
from paraplan.catalog import load_model, load_system, model_names, system_names
from paraplan.estimate import estimate as run_estimate
from paraplan.report.render import print_estimate, simple_table
from paraplan.specs.errors import InputError, input_error_from_pydantic
from paraplan.units import GiB, UnitError

try:  # recent typer vendors click as typer._click
    from typer._click.exceptions import ClickException, NoArgsIsHelpError
except ImportError:  # pragma: no cover - older typer on top of click
    from click.exceptions import ClickException, NoArgsIsHelpError  # type: ignore[no-redef]
from typer import Abort, Exit

EXIT_INPUT_ERROR = 2

app = typer.Typer(
    name="paraplan",
    help="How fast will a transformer train on a cluster, and will it fit? An analytical model.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)


class Recompute(str, Enum):
    none = "none"
    selective = "selective"
    full = "full"


class Dtype(str, Enum):
    fp16 = "fp16"
    bf16 = "bf16"
    fp8 = "fp8"
    fp32 = "fp32"


class Schedule(str, Enum):
    one_f_one_b = "1f1b"
    interleaved = "interleaved"
    gpipe = "gpipe"


class Attention(str, Enum):
    flash = "flash"
    unfused = "unfused"


_TOKEN_SUFFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}


def parse_tokens(text: str) -> float:
    """'15e12', '15T', '2.5B' -> tokens (B = billion, T = trillion); InputError naming --tokens otherwise."""
    raw = text.strip()
    suffix = raw[-1] if raw and raw[-1] in _TOKEN_SUFFIX and raw[-1].isalpha() else ""
    number = raw[: len(raw) - len(suffix)]
    try:
        value = float(number) * _TOKEN_SUFFIX[suffix]
    except ValueError:
        raise InputError(f"--tokens: {text!r} is not a number of tokens; e.g. 15e12, 15T, 300B") from None
    if not value > 0:
        raise InputError(f"--tokens: {text!r} must be positive")
    return value


def _stdout() -> Console:
    return Console(highlight=False, soft_wrap=False)


# ---- estimate --------------------------------------------------------------------------------
@app.command()
def estimate(
    model: Annotated[str, typer.Option("--model", "-m", help="catalog name, or a YAML/JSON file (or a Hugging Face config.json)")],
    system: Annotated[str, typer.Option("--system", "-s", help="catalog name, or a YAML/JSON file")],
    gpus: Annotated[int, typer.Option("--gpus", min=1, help="total GPUs = tp·pp·cp·dp")],
    tp: Annotated[int, typer.Option("--tp", min=1, help="tensor-parallel degree")] = 1,
    pp: Annotated[int, typer.Option("--pp", min=1, help="pipeline stages")] = 1,
    cp: Annotated[int, typer.Option("--cp", min=1, help="context-parallel degree")] = 1,
    vpp: Annotated[int, typer.Option("--vpp", min=1, help="virtual stages per GPU (interleaved)")] = 1,
    micro_batch: Annotated[int, typer.Option("--micro-batch", min=1)] = 1,
    global_batch: Annotated[
        Optional[int],
        typer.Option("--global-batch", min=1, help="default: dp·micro_batch (·pp when interleaved)"),
    ] = None,
    seq_length: Annotated[int, typer.Option("--seq-length", min=1)] = 2048,
    recompute: Annotated[Recompute, typer.Option("--recompute")] = Recompute.none,
    sequence_parallel: Annotated[bool, typer.Option("--sequence-parallel", help="Megatron sequence parallelism")] = False,
    zero: Annotated[int, typer.Option("--zero", min=0, max=3, help="ZeRO stage 0-3 (1 = distributed optimizer)")] = 0,
    dtype: Annotated[Dtype, typer.Option("--dtype")] = Dtype.bf16,
    schedule: Annotated[
        Optional[Schedule], typer.Option("--schedule", help="default: interleaved when vpp > 1, else 1f1b")
    ] = None,
    attention: Annotated[Attention, typer.Option("--attention")] = Attention.flash,
    offload_weights: Annotated[bool, typer.Option("--offload-weights")] = False,
    offload_activations: Annotated[bool, typer.Option("--offload-activations")] = False,
    offload_optimizer: Annotated[bool, typer.Option("--offload-optimizer")] = False,
    overlap_tp_comm: Annotated[bool, typer.Option("--overlap-tp-comm", help="overlap TP collectives with GEMMs")] = False,
    no_overlap_dp: Annotated[bool, typer.Option("--no-overlap-dp", help="do not overlap DP gradient reduction")] = False,
    no_overlap_param_gather: Annotated[bool, typer.Option("--no-overlap-param-gather")] = False,
    placement: Annotated[str, typer.Option("--placement", help="group order on the network, innermost first")] = "tp-cp-dp-pp",
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of tables")] = False,
    ops: Annotated[bool, typer.Option("--ops", help="add the per-op and per-collective tables")] = False,
    tokens: Annotated[Optional[str], typer.Option("--tokens", help="run length in tokens (15e12, 15T, 300B)")] = None,
    price: Annotated[
        Optional[float], typer.Option("--price", min=0.0, help="USD per GPU-hour (default: the system's)")
    ] = None,
    plot: Annotated[
        Optional[Path], typer.Option("--plot", help="also draw the time and memory breakdown to FILE (.png or .svg)")
    ] = None,
) -> None:
    """Time, memory and utilisation of one training step under one plan."""
    if plot is not None and plot.suffix.lower() not in (".png", ".svg"):
        raise InputError(f"--plot: {str(plot)!r} is not allowed; the file name must end in .png or .svg")
    model_spec = load_model(model, field="model")
    system_spec = load_system(system, field="system")
    plan = plan_from_fields(
        {
            "gpus": gpus,
            "tp": tp,
            "pp": pp,
            "cp": cp,
            "vpp": vpp,
            "micro_batch": micro_batch,
            "global_batch": global_batch,
            "seq_length": seq_length,
            "recompute": recompute.value,
            "sequence_parallel": sequence_parallel,
            "zero": zero,
            "dtype": dtype.value,
            "schedule": schedule.value if schedule is not None else None,
            "attention": attention.value,
            "offload_weights": offload_weights,
            "offload_activations": offload_activations,
            "offload_optimizer": offload_optimizer,
            "overlap_tp_comm": overlap_tp_comm,
            "overlap_dp_grad_reduce": not no_overlap_dp,
            "overlap_param_gather": not no_overlap_param_gather,
            "placement": placement,
        }
    )
    run_tokens = parse_tokens(tokens) if tokens is not None else None
    est = run_estimate(model_spec, system_spec, plan, with_ops=ops)
    run = None
    if run_tokens is not None:
        run = est.run_totals(run_tokens, price if price is not None else system_spec.price_per_gpu_hour)
    if plot is not None:
        from paraplan.report.plots import plot_estimate

        plot_estimate(est, plot)
    if as_json:
        out = est.to_dict(include_ops=ops)
        if run is not None:
            out["run"] = run
        print(json.dumps(out, indent=2))
        return
    print_estimate(_stdout(), est, run=run, show_ops=ops)
    if plot is not None:
        print(f"wrote {plot}")


# ---- search ----------------------------------------------------------------------------------
def _int_list(text: Optional[str], flag: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InputError(f"{flag}: {text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 0:
        raise InputError(f"{flag}: {text!r} must list non-negative integers")
    return values


def _choice_list(text: Optional[str], flag: str, allowed: tuple[str, ...]) -> tuple[str, ...] | None:
    if text is None:
        return None
    values = tuple(v.strip() for v in text.split(",") if v.strip())
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise InputError(f"{flag}: {text!r} is not allowed; allowed: comma-separated {', '.join(allowed)}")
    return values


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
    tp: Annotated[Optional[str], typer.Option("--tp", help="restrict tp to these values, e.g. 1,2,4,8")] = None,
    pp: Annotated[Optional[str], typer.Option("--pp", help="restrict pp")] = None,
    cp: Annotated[Optional[str], typer.Option("--cp", help="restrict cp")] = None,
    micro_batch: Annotated[Optional[str], typer.Option("--micro-batch", help="restrict micro-batch sizes")] = None,
    recompute: Annotated[Optional[str], typer.Option("--recompute", help="restrict: none,selective,full")] = None,
    zero: Annotated[Optional[str], typer.Option("--zero", help="restrict ZeRO stages, e.g. 0,1")] = None,
    schedule: Annotated[Optional[str], typer.Option("--schedule", help="restrict: 1f1b,gpipe,interleaved")] = None,
    no_offload: Annotated[bool, typer.Option("--no-offload", help="do not consider offloading")] = False,
    default_overlap: Annotated[bool, typer.Option("--default-overlap", help="keep overlap switches at defaults")] = False,
    default_placement: Annotated[bool, typer.Option("--default-placement", help="only tp-cp-dp-pp placement")] = False,
    price: Annotated[Optional[float], typer.Option("--price", min=0.0, help="USD per GPU-hour for --objective cost")] = None,
    exhaustive: Annotated[bool, typer.Option("--exhaustive", help="evaluate every candidate through the scalar estimator")] = False,
    explain: Annotated[bool, typer.Option("--explain", help="show why the best plan wins over its neighbours")] = False,
    csv_path: Annotated[Optional[Path], typer.Option("--csv", help="write every feasible plan with its metrics")] = None,
    workers: Annotated[int, typer.Option("--workers", min=1, help="processes (used by --exhaustive and --csv)")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of tables")] = False,
) -> None:
    """The fastest plans that fit in memory, over every plan knob, exact w.r.t. the cost model."""
    from paraplan.report.search_view import explain_table, nearest_miss_line, plans_table, summary_line, write_csv
    from paraplan.search.explain import explain as explain_plan
    from paraplan.search.run import exhaustive_search, search as run_search
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
        tp=_int_list(tp, "--tp"),
        pp=_int_list(pp, "--pp"),
        cp=_int_list(cp, "--cp"),
        micro_batch=_int_list(micro_batch, "--micro-batch"),
        recompute=_choice_list(recompute, "--recompute", ("none", "selective", "full")),
        zero=_int_list(zero, "--zero"),
        schedules=_choice_list(schedule, "--schedule", ("1f1b", "gpipe", "interleaved")),
        vary_offload=not no_offload,
        vary_overlap=not default_overlap,
        vary_placement=not default_placement,
        price_per_gpu_hour=price if price is not None else system_spec.price_per_gpu_hour,
    )
    problem.check()
    from rich.progress import Progress

    show_progress = not as_json and (exhaustive or csv_path is not None) and sys.stderr.isatty()  # long searches
    with Progress(console=Console(stderr=True), transient=True, disable=not show_progress) as bar:
        task = bar.add_task("searching", total=None)

        def advance(done: int, total: int | None = None) -> None:
            bar.update(task, completed=done, total=total)

        if exhaustive:
            result = exhaustive_search(problem, top_k=top, workers=workers, progress=advance, collect_all=csv_path is not None)
        else:
            result = run_search(problem, top_k=top, collect_all=csv_path is not None, workers=workers, progress=advance)
    written = write_csv(result, csv_path, seq_length, gpus) if csv_path is not None else None
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
        for item in result.faster_infeasible:
            from paraplan.report.search_view import plan_label

            console.print(f"would be faster but does not fit: {plan_label(item['plan'])} "
                          f"needs {item['peak_memory_gib']:.1f} GiB")


# ---- sweep and plot --------------------------------------------------------------------------
def _split_systems(values: list[str]) -> tuple[str, ...]:
    out = [v.strip() for text in values for v in text.split(",") if v.strip()]
    if not out:
        raise InputError("--system: give at least one system (repeat --system or use a comma list)")
    return tuple(out)


def _sweep_table(document: dict) -> SimpleTable:
    from paraplan.report.plots import fmt_count

    set_paths = [s["path"] for s in document["sweep"]["sets"]]
    plan_column = 2 + len(set_paths)
    table = simple_table("Best plan per point", "system", "GPUs", *(p.split(".")[-1] for p in set_paths), "best plan",
                         "step s", "tokens/s", "MFU", "peak GiB", numeric_from=plan_column + 1, foldable=[plan_column])
    for p in document["points"]:
        cells = [p["system"], f"{p['gpus']:,}", *(str(p[k]) for k in set_paths)]
        if p["feasible"]:
            cells += [p["plan_label"], f"{p['step_time_s']:.3f}", fmt_count(p["tokens_per_s"]), f"{100 * p['mfu']:.1f}%",
                      f"{p['memory']['peak_gib']:.1f}"]
        else:
            miss = p.get("nearest_miss")
            text = (f"nothing fits: nearest miss {miss['memory']['peak_gib']:.0f} of {miss['memory']['capacity_gib']:.0f} GiB"
                    if miss else (p["reason"] or "no plan"))
            cells += [text, "-", "-", "-", "-"]
        table.add_row(*cells)
    return table


@app.command()
def sweep(
    model: Annotated[str, typer.Option("--model", "-m", help="catalog name, or a YAML/JSON file (or a Hugging Face config.json)")],
    system: Annotated[list[str], typer.Option("--system", "-s", help="catalog name or file; repeat or comma-separate for several")],
    gpus: Annotated[str, typer.Option("--gpus", help="GPU counts: 512,1024,2048 or a geometric range 256..16384x2")],
    set_: Annotated[
        Optional[list[str]],
        typer.Option("--set", help="sweep a numeric system field (accelerator.hbm_bandwidth=2TB/s,4TB/s) or model field "
                                   "(model.hidden=...); repeat for more axes"),
    ] = None,
    seq_length: Annotated[int, typer.Option("--seq-length")] = 2048,
    global_batch: Annotated[Optional[int], typer.Option("--global-batch", help="sequences per step")] = None,
    max_global_batch: Annotated[
        Optional[int],
        typer.Option("--max-global-batch", help="instead of --global-batch: largest multiple of dp·micro_batch not above it"),
    ] = None,
    top: Annotated[int, typer.Option("--top", min=1, help="plans kept per point (top-k summary)")] = 5,
    out: Annotated[Path, typer.Option("--out", help="output directory")] = Path("sweep-out"),
    workers: Annotated[int, typer.Option("--workers", min=1, help="local processes (1 = in this process)")] = 1,
    resume: Annotated[bool, typer.Option("--resume", help="skip the points already finished in OUT/points.jsonl")] = False,
    dask: Annotated[
        Optional[str], typer.Option("--dask", help="run on a Dask scheduler at ADDRESS, or 'local' for a LocalCluster")
    ] = None,
    objective: Annotated[str, typer.Option("--objective", help="time | cost | mfu")] = "time",
    dtype: Annotated[Dtype, typer.Option("--dtype")] = Dtype.bf16,
    attention: Annotated[Attention, typer.Option("--attention")] = Attention.flash,
    tp: Annotated[Optional[str], typer.Option("--tp", help="restrict tp to these values, e.g. 1,2,4,8")] = None,
    pp: Annotated[Optional[str], typer.Option("--pp", help="restrict pp")] = None,
    cp: Annotated[Optional[str], typer.Option("--cp", help="restrict cp")] = None,
    micro_batch: Annotated[Optional[str], typer.Option("--micro-batch", help="restrict micro-batch sizes")] = None,
    recompute: Annotated[Optional[str], typer.Option("--recompute", help="restrict: none,selective,full")] = None,
    zero: Annotated[Optional[str], typer.Option("--zero", help="restrict ZeRO stages, e.g. 0,1")] = None,
    schedule: Annotated[Optional[str], typer.Option("--schedule", help="restrict: 1f1b,gpipe,interleaved")] = None,
    no_offload: Annotated[bool, typer.Option("--no-offload", help="do not consider offloading")] = False,
    default_overlap: Annotated[bool, typer.Option("--default-overlap", help="keep overlap switches at defaults")] = False,
    default_placement: Annotated[bool, typer.Option("--default-placement", help="only tp-cp-dp-pp placement")] = False,
    tokens: Annotated[Optional[str], typer.Option("--tokens", help="run length (15T, 300B) for time-to-train")] = None,
    no_plot: Annotated[bool, typer.Option("--no-plot", help="write sweep.json/csv only")] = False,
) -> None:
    """Search the best plan at every point of systems × GPU counts × --set values; write JSON, CSV and plots."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from paraplan.search.space import OBJECTIVES
    from paraplan.sweep.params import parse_gpus, parse_sets
    from paraplan.sweep.run import SweepConfig, run_sweep

    if objective not in OBJECTIVES:
        raise InputError(f"--objective: {objective!r} is not allowed; allowed: {', '.join(OBJECTIVES)}")
    restrictions = {
        "tp": _int_list(tp, "--tp"), "pp": _int_list(pp, "--pp"), "cp": _int_list(cp, "--cp"),
        "micro_batch": _int_list(micro_batch, "--micro-batch"),
        "recompute": _choice_list(recompute, "--recompute", ("none", "selective", "full")),
        "zero": _int_list(zero, "--zero"),
        "schedules": _choice_list(schedule, "--schedule", ("1f1b", "gpipe", "interleaved")),
    }
    config = SweepConfig(
        model=model, systems=_split_systems(system), gpus=parse_gpus(gpus), seq_length=seq_length,
        sets=tuple(parse_sets(set_ or [])), global_batch=global_batch, max_global_batch=max_global_batch, top=top,
        dtype=dtype.value, attention=attention.value, objective=objective, no_offload=no_offload,
        default_overlap=default_overlap, default_placement=default_placement,
        restrictions={k: v for k, v in restrictions.items() if v is not None},
        tokens=parse_tokens(tokens) if tokens is not None else None,
    )
    if dask is not None and not dask.strip():
        raise InputError("--dask: give a scheduler address (tcp://host:8786) or 'local'")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("points"),
               TimeElapsedColumn(), TimeRemainingColumn())
    stderr = Console(stderr=True)
    bar = Progress(*columns, console=stderr, transient=True, disable=not stderr.is_terminal)
    task = bar.add_task("sweep", total=None)

    def started(total: int, skipped: int) -> None:  # after the inputs are checked: errors stay one line
        note = f" ({skipped} already done)" if skipped else ""
        bar.update(task, total=total, completed=skipped, description=f"sweep{note}")
        bar.start()

    def finished(record: dict) -> None:
        bar.advance(task)

    try:
        outcome = run_sweep(config, out, workers=workers, resume=resume, dask=dask, on_point=finished,
                            on_start=started, plots=not no_plot)
    except KeyboardInterrupt:
        bar.stop()
        print(f"interrupted: the finished points are in {out / 'points.jsonl'}; add --resume to continue",
              file=sys.stderr)
        raise typer.Exit(130) from None
    finally:
        bar.stop()
    console = _stdout()
    console.print(_sweep_table(outcome.document))
    skipped = f", {outcome.skipped} resumed from {out / 'points.jsonl'}" if outcome.skipped else ""
    console.print(f"{outcome.ran} points searched{skipped}; wrote {', '.join(str(f) for f in outcome.files)}")


@app.command()
def plot(
    results: Annotated[Path, typer.Argument(help="a sweep.json written by paraplan sweep")],
    out: Annotated[Optional[Path], typer.Option("--out", help="output directory (default: beside sweep.json)")] = None,
) -> None:
    """Re-draw the plots of a saved sweep (PNG and SVG)."""
    from paraplan.report.plots import plot_sweep
    from paraplan.sweep.run import load_results

    document = load_results(results)
    try:
        files = plot_sweep(document, out if out is not None else results.parent)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"sweep.json: {str(results)!r} is not a complete paraplan sweep result ({exc!r})") from None
    print(f"wrote {', '.join(str(f) for f in files)}")


# ---- catalogs --------------------------------------------------------------------------------
def _model_row(name: str) -> dict:
    from paraplan.graph.transformer import embedding_weight_params, layer_weight_params, lm_head_weight_params

    m = load_model(name)
    params = m.layers * layer_weight_params(m, 1) + embedding_weight_params(m, 1) + lm_head_weight_params(m, 1, True)
    return {
        "name": name,
        "params_b": params / 1e9,
        "layers": m.layers,
        "hidden": m.hidden,
        "heads": m.heads,
        "kv_heads": m.n_kv_heads,
        "ffn_hidden": m.ffn_hidden,
        "vocab": m.vocab,
        "mlp": m.mlp,
        "source": m.source,
    }


@app.command()
def models(as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of tables")] = False) -> None:
    """List the model catalog (parameters in billions and shape)."""
    rows = [_model_row(n) for n in model_names()]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = simple_table("Models (paraplan estimate --model NAME)", "name", "params (B)", "layers", "hidden", "heads", "kv heads", "ffn", "vocab", "mlp")
    for r in rows:
        table.add_row(r["name"], f"{r['params_b']:.2f}", *(str(r[k]) for k in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "mlp")))
    _stdout().print(table)


def _system_row(name: str) -> dict:
    s = load_system(name)
    acc = s.accelerator
    try:
        bf16 = acc.peak_matrix_flops("bf16")
    except KeyError:
        bf16 = None
    return {
        "name": name,
        "gpu": acc.name,
        "hbm_gib": acc.hbm_capacity / GiB,
        "hbm_tb_per_s": acc.hbm_bandwidth / 1e12,
        "peak_bf16_tflops": None if bf16 is None else bf16 / 1e12,
        "domain_size": s.node.gpus_per_domain,
        "nvlink_gb_per_s": s.node.nvlink_bandwidth / 1e9,
        "nic_gb_per_s": s.network.nic_bandwidth / 1e9,
        "price_per_gpu_hour": s.price_per_gpu_hour,
        "source": s.source,
    }


@app.command()
def systems(as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of tables")] = False) -> None:
    """List the system catalog (GPU, HBM, peak bf16, NVLink domain, network)."""
    rows = [_system_row(n) for n in system_names()]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = simple_table(
        "Systems (paraplan estimate --system NAME); bandwidths per GPU per direction",
        "name", "gpu", "HBM GiB", "HBM TB/s", "bf16 TFLOP/s", "domain", "NVLink GB/s", "NIC GB/s", "$/GPU-h",
        numeric_from=2,
    )
    for r in rows:
        table.add_row(
            r["name"],
            r["gpu"],
            f"{r['hbm_gib']:.0f}",
            f"{r['hbm_tb_per_s']:.2f}",
            "-" if r["peak_bf16_tflops"] is None else f"{r['peak_bf16_tflops']:.0f}",
            str(r["domain_size"]),
            f"{r['nvlink_gb_per_s']:.0f}",
            f"{r['nic_gb_per_s']:.0f}",
            "-" if r["price_per_gpu_hour"] is None else f"{r['price_per_gpu_hour']:.2f}",
        )
    _stdout().print(table)


# ---- validate --------------------------------------------------------------------------------
_METRIC_LABELS = {
    "step_time_s": "step time (s)",
    "weights_and_optimizer_gib": "weights+opt (GiB)",
    "activations_gib": "activations (GiB)",
    "peak_memory_gib": "peak (GiB)",
}
_LAYERS_MARK = " †"
_LAYERS_NOTE = (
    "† transformer layers of stage 0 only (Korthikanti et al. 2022 Figure 1 scope; "
    "whole-stage values are in --json as stage_*_gib)"
)


def _validation_table(report: dict) -> SimpleTable:
    table = simple_table("Predicted vs measured", "case", "metric", "predicted", "measured", "error %", numeric_from=2)
    for entry in report["cases"]:
        for metric, measured in entry["measured"].items():
            layers = entry["scope"] == "transformer_layers" and metric in ("weights_and_optimizer_gib", "activations_gib")
            table.add_row(
                entry["name"],
                _METRIC_LABELS[metric] + (_LAYERS_MARK if layers else ""),
                f"{entry['predicted'][metric]:.3f}",
                f"{measured:.3f}",
                f"{entry['error_pct'][metric]:+.2f}",
            )
    return table


def _summary_table(summary: dict) -> SimpleTable:
    table = simple_table("Summary", "metric", "cases", "MAPE %")
    for metric, label in _METRIC_LABELS.items():
        if summary.get(f"{metric}_cases"):
            table.add_row(label, str(summary[f"{metric}_cases"]), f"{summary[f'{metric}_mape_pct']:.2f}")
    for file, group in summary["by_source"].items():
        mape = group.get("step_time_s_mape_pct")
        table.add_row(f"{file}: step time", str(group["step_time_cases"]), "-" if mape is None else f"{mape:.2f}")
    if summary.get("max_abs_error_pct") is not None:
        table.add_section()
        table.add_row(
            f"max |error|: {summary['max_abs_error_case']}, {_METRIC_LABELS[summary['max_abs_error_metric']]}",
            "",
            f"{summary['max_abs_error_pct']:.2f}",
        )
    return table


@app.command()
def validate(
    cases: Annotated[
        Optional[list[Path]], typer.Option("--cases", help="case file (JSON/YAML); repeat for more; default: bundled cases")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of tables")] = False,
    max_mape: Annotated[
        Optional[float], typer.Option("--max-mape", min=0.0, help="exit 1 when any MAPE in the summary exceeds this (%)")
    ] = None,
    markdown: Annotated[Optional[Path], typer.Option("--markdown", help="also write the report as Markdown here")] = None,
) -> None:
    """Compare predictions with published measurements (layer-scope rule: see docs/validation.md)."""
    from paraplan.validate.markdown import validation_markdown
    from paraplan.validate.run import load_cases, run_cases, summary_mapes

    report = run_cases(load_cases(cases))
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        console = _stdout()
        console.print(_validation_table(report))
        if any(e["scope"] == "transformer_layers" for e in report["cases"]):
            console.print(_LAYERS_NOTE)
        console.print()
        console.print(_summary_table(report["summary"]))
    if markdown is not None:
        try:
            markdown.write_text(validation_markdown(report))
        except OSError as exc:
            raise InputError(f"--markdown: cannot write {str(markdown)!r}: {exc.strerror}") from None
    if max_mape is not None:
        over = {k: v for k, v in summary_mapes(report["summary"]).items() if v > max_mape}
        if over:
            worst = max(over, key=over.get)
            print(f"validation failed: {len(over)} MAPE value(s) exceed {max_mape}% (worst {worst} = {over[worst]:.2f}%)", file=sys.stderr)
            raise typer.Exit(1)


# ---- entry point -----------------------------------------------------------------------------
def _one_line(message: str) -> str:
    return " ".join(str(message).split())


def _fail(message: str, code: int = EXIT_INPUT_ERROR) -> None:
    print(f"error: {_one_line(message)}", file=sys.stderr)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run ``app``; input errors -> one stderr line and exit 2."""
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="paraplan", standalone_mode=False)
    except (InputError, UnitError) as exc:
        _fail(str(exc))
    except ValidationError as exc:
        _fail(str(input_error_from_pydantic(exc, "input")))
    except NoArgsIsHelpError as exc:  # bare `paraplan`: show the help
        exc.show()
        sys.exit(exc.exit_code)
    except ClickException as exc:
        _fail(exc.format_message().replace("Value error, ", ""), getattr(exc, "exit_code", 1) or EXIT_INPUT_ERROR)
    except Exit as exc:
        sys.exit(exc.exit_code)
    except Abort:
        _fail("aborted", 1)
    except BrokenPipeError:  # e.g. `paraplan models | head`
        sys.exit(0)
    sys.exit(result if isinstance(result, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()
