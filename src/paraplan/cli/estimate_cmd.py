"""``paraplan estimate``: one plan's time, memory and utilisation."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from paraplan.cli.app import (
    EXIT_DOES_NOT_FIT,
    Attention,
    CPAlgorithm,
    Dtype,
    ExpertLoadCvOption,
    FrameworkOption,
    GradDtype,
    Recompute,
    Schedule,
    WidthOption,
    Zero3GatherUnit,
    Zero3ReduceUnit,
    _stdout,
    app,
    load_framework_option,
    precision_defaults,
    refuse_options,
    warn_positions,
)
from paraplan.cli.declare import given, optional, switch
from paraplan.cli.estimate_plan import (
    FIELD_PARAMETER,
    STAGED_ESTIMATE_OPTIONS,
    framework_defaults,
    given_plan_options,
    plan_fields,
    plan_file_sources,
    set_overrides,
)
from paraplan.cli.goodput_opts import (
    GoodputChanges,
    GoodputOption,
    goodput_dict,
    goodput_lines,
)
from paraplan.cli.options import (
    AttentionOption,
    ClusterOption,
    DtypeOption,
    JsonOption,
    PriceOption,
    SetOption,
    TokensOption,
    option_groups,
)
from paraplan.io.options import check_price, parse_tokens
from paraplan.specs.errors import InputError
from paraplan.specs.parallel import DEFAULT_PLACEMENT_LABEL
from paraplan.units import GiB


def _outcome(est) -> str:
    """A fit hint's estimate: its peak memory per GPU and its step time."""
    return f"{est.peak_stage.peak_bytes / GiB:.1f} GiB, step {est.step_time_s:.3g} s"


def fit_hint_lines(model_spec, system_spec, plan, model: str, system: str) -> list[str]:
    """What would make a plan that does not fit fit: single changes, else the search's fastest plan."""
    from paraplan.search.fit_hints import fit_changes

    changes = fit_changes(model_spec, system_spec, plan)
    if changes:
        lines = [
            f"  {c.flag}: peak {_outcome(c.estimate)}, MFU {100 * c.estimate.mfu:.1f}%"
            for c in changes
        ]
        return ["would fit with one change (fastest first):", *lines]
    from paraplan.search.run import search
    from paraplan.search.space import SearchProblem
    from paraplan.specs.plan_label import plan_label

    command = (
        f"paraplan search --model {model} --system {system} --gpus {plan.gpus} "
        f"--global-batch {plan.global_batch} --seq-length {plan.seq_length} --dtype {plan.dtype}"
        + (f" --expert-load-cv {plan.expert_load_cv:g}" if plan.expert_load_cv is not None else "")
    )
    # the command's options
    fixed = ("gpus", "seq_length", "global_batch", "dtype", "attention", "expert_load_cv")
    problem = SearchProblem(model_spec, system_spec, **{f: getattr(plan, f) for f in fixed})
    try:
        result = search(problem, top_k=1)
    except InputError:
        result = None
    if result is None or not result.plans:
        return [
            f"no single change fits, and no plan of {plan.gpus} GPUs fits at global batch "
            f"{plan.global_batch}: more GPUs, a smaller micro-batch or a shorter sequence may ({command})"
        ]
    best = result.plans[0]
    return [
        "no single change fits; the fastest plan that fits at this batch "
        f"({_outcome(best.estimate)}):",
        f"  {plan_label(best.plan)}",
        f"  ({command})",
    ]


def band_lines(model_spec, system_spec, plan, est, framework) -> list[str]:
    """The estimate's error band (validate.band) and its unvalidated features, as report lines;
    ``framework``: the profile (a FrameworkSpec: a file profile's stack is its base chain's) or None."""
    from paraplan.validate.band import error_band

    band = error_band(model_spec, system_spec, plan, est.step_time_s, framework)
    lines = [
        f"error band ({band.coverage_pct} % claimed): step {band.low_s:.4g} to {band.high_s:.4g} s "
        f"({band.low_pct:+.1f} % / {band.high_pct:+.1f} %), {band.basis}"
    ]
    if band.extrapolated:
        lines.append(f"extrapolated (no validation case): {', '.join(band.extrapolated)}")
    return lines


def kernel_fallback_of(system_spec, profile, attention: str) -> dict | None:
    """{"asked", "priced", "architecture"} when the fused-attention kernel the profile (else the system) asks for is
    priced as another on the system's architecture (cost.attention.kernel_fallback: FlashAttention-3 on Blackwell
    runs as cuDNN's kernel, ...); None otherwise, or when attention is unfused."""
    if attention != "flash":
        return None
    from paraplan.cost.attention import kernel_fallback

    acc = system_spec.accelerator
    asked = profile.attention_kernel if profile is not None else acc.efficiency.attention_kernel
    priced = kernel_fallback(asked, acc.architecture)
    if priced is None:
        return None
    return {"asked": asked, "priced": priced, "architecture": acc.architecture}


def kernel_fallback_line(fallback: dict) -> str:
    """The report's line of a kernel_fallback_of."""
    return (
        f"attention kernel: {fallback['asked']} asked, priced as {fallback['priced']} on "
        f"{fallback['architecture']} (cost.attention.KERNEL_FALLBACK)"
    )


@app.command()
@option_groups
def estimate(
    ctx: typer.Context,
    model: optional(
        str,
        "--model",
        "-m",
        help="catalog name, or a YAML/JSON file (or a Hugging Face config.json); default with "
        "--plan: the model a search/estimate JSON names",
    ) = None,
    system: optional(
        str, "--system", "-s", help="catalog name, or a YAML/JSON file (required unless --cluster)"
    ) = None,
    gpus: optional(
        int, "--gpus", help="total GPUs = tp·pp·cp·dp (required unless --plan)", min=1
    ) = None,
    tp: given(int, "--tp", help="tensor-parallel degree", min=1) = 1,
    pp: given(int, "--pp", help="pipeline stages", min=1) = 1,
    cp: given(int, "--cp", help="context-parallel degree", min=1) = 1,
    vpp: given(int, "--vpp", help="virtual stages per GPU (interleaved)", min=1) = 1,
    micro_batch: given(int, "--micro-batch", min=1) = 1,
    global_batch: optional(
        int, "--global-batch", help="default: dp·micro_batch (·pp when interleaved)", min=1
    ) = None,
    seq_length: given(int, "--seq-length", min=1) = 2048,
    recompute: given(Recompute, "--recompute") = Recompute.none,
    recompute_num_layers: optional(
        int,
        "--recompute-num-layers",
        help="with --recompute full: layers of each pipeline chunk recomputed, the others "
        "keep their activations (Megatron-LM's block method)",
        min=1,
    ) = None,
    sequence_parallel: switch("--sequence-parallel", help="Megatron sequence parallelism") = False,
    zero: given(int, "--zero", help="ZeRO stage 0-3 (1 = distributed optimizer)", min=0, max=3) = 0,
    dtype: DtypeOption = Dtype.bf16,
    grad_dtype: given(
        GradDtype,
        "--grad-dtype",
        help="gradient accumulation/reduction dtype: fp32 main grads or bf16",
    ) = GradDtype.fp32,
    fp8_weight_copies: switch(
        "--fp8-weight-copies",
        help="fp8 / FP4: Transformer Engine caches quantised weight copies beside the "
        "bf16 weights (no fp8 primary weights): +2 B per layer parameter (nvfp4 1.125 B, mxfp4 1.0625 B)",
    ) = False,
    zero3_max_live_params: optional(
        float,
        "--zero3-max-live-params",
        help="ZeRO-3: most gathered parameters resident per GPU (DeepSpeed "
        "stage3_max_live_parameters); default: two whole layers (FSDP)",
        min=1.0,
    ) = None,
    zero3_prefetch_layers: given(
        int,
        "--zero3-prefetch-layers",
        help="ZeRO-3/FSDP: layers gathered ahead of use when the gather overlaps (0: none)",
        min=0,
        max=8,
    ) = 1,
    zero3_backward_prefetch_layers: optional(
        int,
        "--zero3-backward-prefetch-layers",
        help="ZeRO-3/FSDP: layers gathered ahead in the backward (0: none, FSDP1 backward_prefetch "
        "None); default: as --zero3-prefetch-layers",
        min=0,
        max=8,
    ) = None,
    zero3_gather_unit: given(
        Zero3GatherUnit,
        "--zero3-gather-unit",
        help="ZeRO-3: one all-gather per layer, or one per weight tensor (DeepSpeed <= 0.5.4)",
    ) = Zero3GatherUnit.layer,
    zero3_reduce_unit: given(
        Zero3ReduceUnit,
        "--zero3-reduce-unit",
        help="ZeRO-3: one gradient reduce-scatter per layer, or one "
        "per weight tensor (DeepSpeed <= 0.5.x)",
    ) = Zero3ReduceUnit.layer,
    zero3_regather_recompute: switch(
        "--zero3-regather-recompute",
        help="ZeRO-3 with full recomputation: gather the weights again "
        "for the recomputed forward (DeepSpeed v0.3.13-v0.3.16)",
    ) = False,
    cp_algorithm: given(
        CPAlgorithm,
        "--cp-algorithm",
        help="context parallelism: ring (K/V ring exchange) or all-to-all (Ulysses)",
    ) = CPAlgorithm.ring,
    schedule: optional(
        Schedule, "--schedule", help="default: interleaved when vpp > 1, else 1f1b"
    ) = None,
    attention: AttentionOption = Attention.flash,
    offload_weights: switch("--offload-weights") = False,
    offload_activations: switch("--offload-activations") = False,
    offload_activation_layers: optional(
        int,
        "--offload-activation-layers",
        help="with --offload-activations: decoder layers per pipeline stage that offload (Megatron-LM "
        "--cpu-offloading-num-layers); default: all",
        min=1,
    ) = None,
    offload_optimizer: switch("--offload-optimizer") = False,
    overlap_tp_comm: switch("--overlap-tp-comm", help="overlap TP collectives with GEMMs") = False,
    no_overlap_dp: switch("--no-overlap-dp", help="do not overlap DP gradient reduction") = False,
    no_overlap_param_gather: switch("--no-overlap-param-gather") = False,
    placement: given(
        str, "--placement", help="group order on the network, innermost first"
    ) = DEFAULT_PLACEMENT_LABEL,
    stage_layers: optional(
        str, "--stage-layers", help="decoder layers of every pipeline stage, e.g. 15,16,16,...,15"
    ) = None,
    layers_first_stage: optional(int, "--layers-first-stage", min=0) = None,
    layers_last_stage: optional(int, "--layers-last-stage", min=0) = None,
    embedding_as_layer: switch(
        "--embedding-as-layer", help="count the embedding as a layer when splitting stages"
    ) = False,
    loss_as_layer: switch("--loss-as-layer", help="count the LM head and loss as a layer") = False,
    ep: given(int, "--ep", help="expert-parallel degree (carved out of tp·cp·dp)", min=1) = 1,
    etp: given(int, "--etp", help="expert tensor-parallel degree", min=1) = 1,
    moe_dispatcher: given(
        str, "--moe-dispatcher", help="alltoall | allgather | deepep | hybridep"
    ) = "alltoall",
    capacity_factor: optional(
        float, "--capacity-factor", help="expert capacity factor (default dropless)"
    ) = None,
    moe_balance: given(str, "--moe-balance", help="learned | forced") = "learned",
    expert_load_cv: ExpertLoadCvOption = None,
    moe_a2a_overlap: switch(
        "--moe-a2a-overlap", help="overlap dispatch/combine with compute"
    ) = False,
    recompute_modules: optional(
        str,
        "--recompute-modules",
        help="selective recompute by module (Megatron-LM names), e.g. "
        "core_attn,mlp,layernorm or mla_up_proj,moe_act",
    ) = None,
    tp_layout: given(
        str,
        "--tp-layout",
        help="1d (Megatron) | 2d (SUMMA grid) | 2d-seq (heads over "
        "tp, sequence over cp, K/V all-gathered); docs/model.md §9",
    ) = "1d",
    tp_rows: optional(
        int, "--tp-rows", help="2d: rows of the tp grid (default ≈ √tp)", min=1
    ) = None,
    summa_panels: optional(
        int,
        "--summa-panels",
        help="2d: SUMMA panels per product (default max(rows, columns))",
        min=1,
    ) = None,
    as_json: JsonOption = False,
    ops: switch("--ops", help="add the per-op and per-collective tables") = False,
    tokens: TokensOption = None,
    price: PriceOption = None,
    plot: optional(
        Path,
        "--plot",
        help="also draw the time and memory breakdown to FILE (.png or .svg) in an existing directory",
    ) = None,
    plan_file: optional(
        str,
        "--plan",
        help="plan from a file: search --json (FILE#N = rank N), an export, PlanSpec YAML/JSON, "
        "or a non-uniform plan (a list of stages, docs/heterogeneous.md). Plan options given beside it "
        "(--tp 4, --gpus 16, --zero 1, ...) override the file's values (dp is inferred again when "
        "gpus/tp/pp/cp change); a non-uniform plan takes none",
    ) = None,
    cluster: ClusterOption = None,
    set_: SetOption = None,
    framework: FrameworkOption = None,
    width: WidthOption = None,
    goodput: GoodputOption = False,
    goodput_changes: GoodputChanges = GoodputChanges(),
) -> None:
    """Time, memory and utilisation of one training step under one plan.

    Exit status 1 when the plan does not fit in memory (the report says which single change would
    make it fit), 2 on bad input; a peak within 5 % of capacity either way is an uncertain fit
    (step.margin), exit 0."""
    params = dict(locals())  # the options by parameter name, before anything else is bound here
    from paraplan.catalog import load_model, load_system
    from paraplan.export.planfile import load_plan_option
    from paraplan.graph.params import parameter_counts
    from paraplan.report.render import print_estimate
    from paraplan.specs.plan_fields import plan_from_fields
    from paraplan.step.estimate import estimate as run_estimate
    from paraplan.step.margin import DOES_NOT_FIT

    fields = plan_fields(params)
    given = given_plan_options(ctx, fields)
    model, system, framework, named = plan_file_sources(plan_file, model, system, framework)
    if cluster is not None or (
        plan_file is not None and "#" not in plan_file
    ):  # non-uniform plans: issue 10
        from paraplan.cli.hetero_cmd import estimate_plan_file, plan_file_is_non_uniform

        if plan_file is not None and plan_file_is_non_uniform(Path(plan_file)):
            if given:
                raise InputError(
                    f"--plan: {plan_file!r} is a non-uniform plan (a list of stages); "
                    f"{', '.join(given.values())} cannot be applied to it (edit the file)"
                )
            if not estimate_plan_file(
                model, Path(plan_file), cluster, system, as_json, framework, set_
            ):
                raise typer.Exit(EXIT_DOES_NOT_FIT)
            return
        if cluster is not None:
            raise InputError(
                "--cluster: needs --plan FILE with a list of stages (a non-uniform plan, docs/heterogeneous.md)"
            )
    if system is None:
        raise InputError(
            "--system: missing; give --system (or --cluster with a non-uniform --plan)"
        )
    if plan_file is None and gpus is None:
        raise InputError("--gpus: missing; give --gpus N (or --plan FILE)")
    if plot is not None:
        from paraplan.report.estimate_plot import check_plot_path

        check_plot_path(plot)
    check_price(price)
    model_spec = load_model(model, field="model", referenced="model" in named)
    system_spec = load_system(system, field="system", referenced="system" in named)
    from paraplan.specs.uniform_stages import costed_by_stages

    staged = costed_by_stages(model_spec)  # encoder-decoders: the per-stage estimator (issue 10)
    if staged:
        refuse_options(
            ctx,
            STAGED_ESTIMATE_OPTIONS | {FIELD_PARAMETER.get(f, f) for f in fields},
            "for an encoder-decoder model (costed stage by stage)",
            "the plan options, --plan, --set, --json, --width",
        )
    profile = load_framework_option(framework)
    from paraplan.cost.frameworks import run_specs

    # the profile adapts the system, then the --set values (winning): the one order of every command
    model_spec, system_spec = run_specs(model_spec, system_spec, profile, set_overrides(set_))
    if plan_file is not None:
        plan = load_plan_option(plan_file, model_spec, seq_length, {f: fields[f] for f in given})
    else:
        fields |= precision_defaults(ctx, system_spec)
        plan = plan_from_fields(framework_defaults(ctx, fields, profile))
    if staged:
        from paraplan.cli.hetero_cmd import estimate_uniform_stages

        fits = estimate_uniform_stages(model_spec, system_spec, plan, as_json, width)
        warn_positions(model_spec, plan.seq_length)
        if not fits:
            raise typer.Exit(EXIT_DOES_NOT_FIT)
        return
    run_tokens = parse_tokens(tokens) if tokens is not None else None
    est = run_estimate(model_spec, system_spec, plan, with_ops=ops)
    warn_positions(model_spec, plan.seq_length)  # after the estimate: input errors stay one line
    run = None
    if run_tokens is not None:
        run = est.run_totals(
            run_tokens, price if price is not None else system_spec.price_per_gpu_hour
        )
    good = (
        goodput_dict(
            est,
            model_spec,
            system_spec,
            plan,
            run_tokens,
            price,
            goodput_changes.inputs(),
        )
        if goodput
        else None
    )
    if plot is not None:
        from paraplan.report.estimate_plot import plot_estimate

        plot_estimate(est, plot)
    counts = parameter_counts(model_spec)
    hints = [] if est.fits else fit_hint_lines(model_spec, system_spec, plan, model, system)
    framework_name = profile.name if profile is not None else None
    fallback = kernel_fallback_of(system_spec, profile, plan.attention)
    if as_json:
        from paraplan.validate.band import error_band

        out = est.to_dict(include_ops=ops)
        out["parameters"] = counts.to_dict()
        out["framework"] = framework_name
        out["error_band"] = error_band(
            model_spec, system_spec, plan, est.step_time_s, profile
        ).to_dict()
        if fallback is not None:
            out["attention_kernel"] = fallback
        if set_:
            out["overrides"] = dict(text.split("=", 1) for text in set_)
        if run is not None:
            out["run"] = run
        if good is not None:
            out["goodput"] = good
        if not est.fits:
            out["fit_hints"] = hints
        print(json.dumps(out, indent=2))
    else:
        notes = [f"framework profile: {framework_name}"] if framework_name else []
        notes += [kernel_fallback_line(fallback)] if fallback is not None else []
        notes += band_lines(model_spec, system_spec, plan, est, profile)
        print_estimate(
            _stdout(width), est, run=run, show_ops=ops, hints=hints, parameters=counts, notes=notes
        )
        if good is not None:
            print("\n".join(goodput_lines(good)))
        if plot is not None:
            print(f"wrote {plot}")
    if est.fit == DOES_NOT_FIT:  # a plan within the memory margin of capacity is uncertain, exit 0
        raise typer.Exit(EXIT_DOES_NOT_FIT)
