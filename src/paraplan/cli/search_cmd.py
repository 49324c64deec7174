"""``paraplan search``: the fastest plans that fit."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, replace
from pathlib import Path

import typer

from paraplan.cli.app import (
    EXIT_DOES_NOT_FIT,
    Attention,
    DispatcherOption,
    Dtype,
    EpOption,
    EtpOption,
    ExpertLoadCvOption,
    FrameworkOption,
    WidthOption,
    _choice_list,
    _stdout,
    app,
    explicit_options,
    load_framework_option,
    precision_defaults,
    progress_bar,
    refuse_options,
    want_progress,
    warn_positions,
)
from paraplan.cli.declare import given, optional, switch
from paraplan.cli.goodput_opts import (
    GoodputChanges,
    time_to_train_objective,
    ttt_lines,
    ttt_search,
    ttt_title,
)
from paraplan.cli.options import (
    AttentionOption,
    ClusterOption,
    DtypeOption,
    JsonOption,
    ModelOption,
    PriceOption,
    SearchAxes,
    SearchBatch,
    SetOption,
    SpaceSwitches,
    TokensOption,
    option_groups,
)
from paraplan.io.options import check_price, parse_tokens
from paraplan.search.headroom import DEFAULT_MEMORY_HEADROOM, fit_note
from paraplan.search.staged import AMP_SEARCH_AXES, STAGE_SEARCH_AXES, STAGE_SEARCH_INPUTS
from paraplan.specs.errors import InputError
from paraplan.specs.limits import LARGE_BLOCKS, LARGE_COSTINGS, MAX_TOP


def launch_note(launches: list[list[str]]) -> str:
    """One line: which frameworks launch each row (paraplan export; docs/export.md)."""
    rows = "; ".join(f"{i} {', '.join(t) or 'none'}" for i, t in enumerate(launches, start=1))
    return f"launches in (paraplan export; --framework F searches only F's plans): {rows}"


# the options the per-stage searches (cli.hetero_cmd.search_hetero) honour, by parameter name (their inputs
# and axes: search.staged; with --cluster also AMP_SEARCH_AXES); any other is refused
HETERO_SEARCH_OPTIONS = frozenset(
    {
        "system",
        "gpus",
        "cluster",
        "non_uniform",
        "as_json",
        "width",
        *STAGE_SEARCH_INPUTS,
        *STAGE_SEARCH_AXES,
    }
)
RESTRICT_HINT = (
    "restrict axes for a faster search: --tp, --pp, --cp, --ep, --micro-batch, --dispatcher, --no-offload, "
    "--default-placement"
)


def _expert_restrictions(axes: SearchAxes, ep, etp, dispatcher, expert_load_cv) -> dict:
    """The HeteroProblem fields of the MoE options (--ep, --etp, --dispatcher: search.staged.experts.EXPERT_AXES,
    parsed as the uniform search parses them; --expert-load-cv), for the per-stage searches."""
    from paraplan.search.staged.experts import EXPERT_AXES

    parsed = axes.restrictions(ep=ep, etp=etp, dispatcher=dispatcher)
    return {name: parsed[name] for name in EXPERT_AXES} | {"expert_load_cv": expert_load_cv}


@app.command()
@option_groups
def search(
    ctx: typer.Context,
    model: ModelOption,
    system: optional(str, "--system", "-s", help="catalog name, or a YAML/JSON file") = None,
    gpus: optional(int, "--gpus", help="total GPUs") = None,
    batch: SearchBatch = SearchBatch(),
    top: given(int, "--top", help="how many plans to show", min=1, max=MAX_TOP) = 10,
    objective: given(
        str,
        "--objective",
        help="time (s per token) | cost (USD per token, at --price) | mfu | robust "
        "(s per token at the pessimistic end of each plan's error band) | time-to-train "
        "(expected wall-clock for --tokens with failures, checkpoints, restarts; docs/goodput.md) "
        "| time-to-train-p90 | cost-to-train | cost-to-train-p90",
    ) = "time",
    dtype: DtypeOption = Dtype.bf16,
    attention: AttentionOption = Attention.flash,
    axes: SearchAxes = SearchAxes(),
    ep: EpOption = None,
    etp: EtpOption = None,
    dispatcher: DispatcherOption = None,
    expert_load_cv: ExpertLoadCvOption = None,
    tp_layout: optional(
        str,
        "--tp-layout",
        help="tensor-parallel layouts to try: comma-separated 1d,2d,2d-seq "
        "(default 1d; docs/model.md §9)",
    ) = None,
    switches: SpaceSwitches = SpaceSwitches(),
    price: PriceOption = None,
    tokens: TokensOption = None,
    goodput_changes: GoodputChanges = GoodputChanges(),
    memory_headroom: given(
        float,
        "--memory-headroom",
        help="share of HBM kept free beside the modelled peak (allocator fragmentation, runtime "
        "buffers; docs/export.md); plans within one more headroom of the limit are marked "
        "'uncertain fit'",
        min=0.0,
        max=0.5,
    ) = DEFAULT_MEMORY_HEADROOM,
    set_: SetOption = None,
    exhaustive: switch(
        "--exhaustive", help="evaluate every candidate through the scalar estimator"
    ) = False,
    explain: switch("--explain", help="show why the best plan wins over its neighbours") = False,
    csv_path: optional(
        Path, "--csv", help="write the plans shown (the top K) with their metrics to FILE"
    ) = None,
    csv_all: optional(
        Path,
        "--csv-all",
        help="write EVERY feasible plan to FILE: evaluates the whole space, often millions "
        "of rows (the count is printed)",
    ) = None,
    workers: optional(
        int,
        "--workers",
        help="processes: for --exhaustive (default 1), and a large block-by-block search split by costing class (default: the usable CPUs, at most 4, on Linux)",
        min=1,
    ) = None,
    as_json: JsonOption = False,
    width: WidthOption = None,
    cluster: ClusterOption = None,
    non_uniform: switch(
        "--non-uniform",
        help="per-stage GPUs / tp / recompute on one GPU type (one ep / etp per plan; cp 1 unless --cp "
        "lists more, one on every stage; schedule 1f1b and uniform seeds of 1f1b, interleaved, gpipe unless "
        "--schedule lists them, zb-h1 among them; dualpipe is not searched, estimate --plan prices it; no "
        "offload): Aceso-style search",
    ) = False,
    time_budget: given(
        float, "--time-budget", help="seconds for the --cluster and --non-uniform searches", min=0.0
    ) = 5.0,
    framework: FrameworkOption = None,
) -> None:
    """The best plans that fit in memory, over every plan knob, exact w.r.t. the cost model.

    Exit status 1 when no plan fits (the nearest miss is printed), 2 on bad input."""
    from paraplan.catalog import load_model
    from paraplan.specs.rules import costed_by_stages

    model_spec = load_model(model, field="model") if cluster is None and not non_uniform else None
    staged_model = model_spec is not None and costed_by_stages(model_spec)
    if (
        cluster is not None or non_uniform or staged_model
    ):  # mixed clusters / per-stage plans / encoder-decoders: issue 10
        from paraplan.cli.hetero_cmd import search_hetero

        where = (
            "for an encoder-decoder model (AMP-style per-stage search)"
            if staged_model
            else "with --cluster / --non-uniform (per-stage search)"
        )
        refuse_options(
            ctx, HETERO_SEARCH_OPTIONS | (set() if non_uniform else set(AMP_SEARCH_AXES)), where
        )
        restrictions = axes.restrictions()
        if batch.global_batch is None:
            raise InputError(
                "--global-batch: missing; the per-stage searches (--cluster, --non-uniform, "
                "encoder-decoder models) search a fixed global batch"
            )
        note = (
            "encoder-decoder: AMP-style per-stage search on one GPU type (docs/heterogeneous.md)"
            if staged_model
            else ""
        )
        result = search_hetero(
            model,
            str(cluster) if cluster else None,
            system,
            gpus,
            non_uniform,
            batch.seq_length,
            batch.global_batch,
            dtype.value,
            attention.value,
            top,
            as_json,
            time_budget,
            width,
            note,
            {AMP_SEARCH_AXES[k]: restrictions[k] for k in AMP_SEARCH_AXES}
            | {field: restrictions[key] for key, field in STAGE_SEARCH_AXES.values()}
            | _expert_restrictions(axes, ep, etp, dispatcher, expert_load_cv),
            framework,
            "attention" in explicit_options(ctx, ("attention",)),
            "dtype" in explicit_options(ctx, ("dtype",)),
        )
        if not result.plans:
            raise typer.Exit(EXIT_DOES_NOT_FIT)
        return
    if system is None or gpus is None:
        raise InputError(
            f"{'--system' if system is None else '--gpus'}: missing; give --system and --gpus (or --cluster FILE)"
        )
    from paraplan.api import search_setup
    from paraplan.catalog import load_system
    from paraplan.report.search_view import (
        band_note,
        explain_band_lines,
        explain_table,
        nearest_miss_line,
        plan_band,
        plan_label,
        plans_table,
        search_document,
        summary_line,
    )
    from paraplan.search.run import search as run_search
    from paraplan.specs.tp_layout import TP_LAYOUTS  # here: the help loads no pydantic model
    from paraplan.units import GiB

    if gpus <= 0:
        raise InputError(f"--gpus: {gpus} is not allowed; must be a positive integer")
    if csv_path is not None and csv_all is not None and csv_path.resolve() == csv_all.resolve():
        raise InputError(
            f"--csv-all: {str(csv_all)!r} is also the --csv file; give two different files"
        )
    run_tokens = parse_tokens(tokens) if tokens is not None else None
    ttt = time_to_train_objective(objective, run_tokens, exhaustive, csv_all)
    good_inputs = goodput_changes.inputs() if ttt else None
    objective = "time" if ttt else objective
    check_price(price)
    from paraplan.cli.estimate_plan import apply_sets, set_overrides

    given_model, given_system = model_spec, load_system(system, field="system")
    # the --set values checked, and the system they give read for the price and precision defaults
    model_spec, system_spec = apply_sets(given_model, given_system, set_ or [])
    profile = load_framework_option(framework)  # an unknown name is one line before anything runs
    if objective == "cost" and price is None and system_spec.price_per_gpu_hour is None:
        raise InputError(
            f"--price: --objective cost needs a price and {system_spec.name} has none; "
            "give --price USD per GPU-hour"
        )
    attention_given = "attention" in explicit_options(ctx, ("attention",))
    precision = precision_defaults(
        ctx, system_spec, ("dtype",) if profile else ("dtype", "attention")
    )
    dtype = Dtype(precision.get("dtype", dtype.value))
    problem, full_hbm = search_setup(
        given_model,  # search.setup.search_specs: the profile, then --set (winning, as in estimate), then the headroom
        given_system,
        gpus,
        profile,
        price,
        memory_headroom=memory_headroom,
        overrides=set_overrides(set_),
        **asdict(batch),
        dtype=dtype.value,
        **(
            {"attention": precision.get("attention", attention.value)}
            if attention_given or profile is None
            else {}
        ),
        objective=objective,
        **axes.restrictions(ep=ep, etp=etp, dispatcher=dispatcher),
        expert_load_cv=expert_load_cv,
        **switches.problem_fields(),
        tp_layouts=_choice_list(tp_layout, "--tp-layout", TP_LAYOUTS) or ("1d",),
    )
    system_spec = problem.system  # adapted to the framework profile
    problem.check()
    sink = None
    if (
        csv_all is not None
    ):  # report.search_csv and search.exhaustive load when asked for (issue 31)
        from paraplan.report.search_csv import CsvSink

        sink = CsvSink(csv_all)
    if (
        workers is None and not exhaustive
    ):  # before the progress bar's thread starts (auto_workers forks from one thread)
        from paraplan.search.processes import auto_workers

        workers = auto_workers()
    show_progress = not as_json and want_progress()  # a transient bar on the terminal, or asked
    try:
        with progress_bar(show_progress) as bar:
            task = bar.add_task("searching", total=None)

            def advance(done: int, total: int | None = None, phase: str = "searching") -> None:
                if phase == "layer costs" and done == 0 and total and total >= LARGE_COSTINGS:
                    print(
                        f"note: {total:,} distinct layer costings (milliseconds each) before the search can "
                        f"start; {RESTRICT_HINT}",
                        file=sys.stderr,
                    )
                if phase == "block bounds" and done == 0 and total and total >= LARGE_BLOCKS:
                    print(
                        f"note: a space this large is searched block by block ({total:,} blocks of tp, cp, dp, pp "
                        f"and micro-batch; seconds, ~2-4 s for the largest, split over --workers processes); "
                        f"{RESTRICT_HINT}",
                        file=sys.stderr,
                    )
                bar.update(task, completed=done, total=total, description=phase)

            if ttt:
                result, ttt_info = ttt_search(
                    problem, run_tokens, top, run_search, workers, advance, ttt, good_inputs
                )
            elif exhaustive:
                n_rows = _exhaustive_note(problem, workers)
                from paraplan.search.exhaustive import exhaustive_search

                result = exhaustive_search(
                    problem,
                    top_k=top,
                    workers=workers,
                    progress=lambda row: advance(row, n_rows, "exhaustive"),
                    collect_all=sink is not None,
                )
                if sink is not None:
                    sink.write_plans(result.all_feasible or [], batch.seq_length)
            else:
                result = run_search(
                    problem, top_k=top, workers=workers, progress=advance, feasible_sink=sink
                )
    except BaseException:
        if sink is not None:
            sink.discard()
        raise
    if sink is not None:
        sink.close()
    warn_positions(problem.model, batch.seq_length)  # after the search: input errors stay one line
    written = sink.rows if sink is not None else None
    shown = None
    if csv_path is not None:
        from paraplan.report.search_csv import write_top_csv

        shown = write_top_csv(csv_path, result, problem, run_tokens)
    alternatives = []
    if explain and result.plans:  # search.explain loads only when asked for
        from paraplan.search.explain import explain as explain_plan

        alternatives = explain_plan(problem, result.plans[0].plan, result.plans[0].estimate)
    from paraplan.api import annotate_rows, launch_targets_of

    launches = launch_targets_of(problem, result) if not (as_json or problem.framework) else []
    if as_json:
        out = search_document(problem, result, run_tokens)
        annotate_rows(out, problem, result, full_hbm, memory_headroom)
        if ttt:
            out["time_to_train"] = ttt_info
        if explain and result.plans:
            out["explain"] = [a.__dict__ for a in alternatives]
            out["explain_unvalidated"] = list(plan_band(result.plans[0], problem).extrapolated)
        if written is not None:
            out["csv_all_rows"] = written
        if shown is not None:
            out["csv_rows"] = shown
        print(json.dumps(out, indent=2))
    else:
        console = _stdout(width)
        console.print(
            f"{problem.model.name} on {gpus} x {system_spec.name}, seq {batch.seq_length}, "
            + (
                f"global batch {batch.global_batch}"
                if batch.global_batch
                else f"max global batch {batch.max_global_batch}"
            )
            + f", {dtype.value}, objective {ttt or objective}"
            + (f", framework {problem.framework}" if problem.framework else "")
            + (
                f", expert load cv {problem.expert_load_cv:g}"
                if problem.expert_load_cv is not None
                else ""
            )
        )
        if result.plans:
            title = ttt_title(ttt_info) if ttt else None
            console.print(plans_table(result, problem, run_tokens, title=title))
            if ttt:
                console.print("\n".join(ttt_lines(ttt_info)))
            console.print(band_note(result, problem))
            if not problem.framework:
                console.print(launch_note(launches))
            if note := fit_note(result, full_hbm, memory_headroom):
                console.print(note)
            if result.robust_exact is False:
                console.print(
                    "robust ranking over the fastest plans by predicted time only (search.robust.MAX_TIME_GROUPS)"
                )
        else:
            console.print(nearest_miss_line(result, problem))
        console.print(summary_line(result))
        if shown is not None:
            console.print(f"wrote the {shown} plans shown to {csv_path}")
        if written is not None:
            console.print(f"wrote every feasible plan, {written:,} rows, to {csv_all}")
        if alternatives:
            console.print()
            console.print(explain_table(alternatives, result.plans[0].estimate.step_time_s))
            for line in explain_band_lines(result.plans[0], problem):
                console.print(line)
            capacity = system_spec.accelerator.hbm_capacity / GiB
            best_obj = result.plans[0].objective
            for item in result.faster_infeasible:
                gain = (
                    1 - item["objective"] / best_obj
                    if problem.objective != "mfu"
                    else item["objective"] / best_obj - 1
                )
                console.print(
                    f"{gain:.1%} faster but does not fit: {plan_label(item['plan'])} "
                    f"needs {item['peak_memory_gib']:.1f} GiB > {capacity:.0f} GiB"
                )
    _split_note(problem, result)
    if not result.plans:
        raise typer.Exit(EXIT_DOES_NOT_FIT)


EXHAUSTIVE_NOTE_S = 60.0  # --exhaustive says how long it will take when that is longer than this


def _exhaustive_note(problem, workers: int | None) -> int:
    """The rows of an exhaustive search (its progress total); a note on stderr with the estimated time when it
    exceeds EXHAUSTIVE_NOTE_S (search.exhaustive.exhaustive_size)."""
    from paraplan.search.exhaustive import exhaustive_size

    n_rows, candidates, seconds = exhaustive_size(problem)
    seconds /= max(workers or 1, 1)
    if seconds > EXHAUSTIVE_NOTE_S:
        print(
            f"note: --exhaustive evaluates ~{candidates:,} candidates one by one: about "
            f"{seconds / 60:.0f} min on {workers or 1} process(es); the default search returns the same "
            "top plans (tests/search/test_exactness.py) in seconds",
            file=sys.stderr,
        )
    return n_rows


def _split_note(problem, result) -> None:
    """After the plans, a note on stderr when the best plan pipelines a model with MTP modules (its last stage holds
    them beside the LM head) and ``--vary-split`` would search other first / last stage layer counts for its pp
    (search.space.SearchProblem.split_options): on the moe-visible DeepSeek-V3 runs the default split's best is 12-28 %
    slower than with them (docs/model.md §8); on models without MTP the gain measured there is 0-3.4 %."""
    if problem.vary_split or not result.plans or not problem.model.mtp_layers:
        return
    pp = result.plans[0].plan.pp
    if pp > 1 and len(replace(problem, vary_split=True).split_options(pp)) > 1:
        sys.stdout.flush()
        print(
            f"note: the best plan has pp {pp}; --vary-split also searches the first / last stage layer counts "
            "(embedding, loss and MTP modules counted as layers), which can be faster (docs/model.md §4)",
            file=sys.stderr,
        )
