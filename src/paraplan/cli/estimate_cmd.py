"""``paraplan estimate``: one plan's time, memory and utilisation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from paraplan.api import plan_from_fields
from paraplan.specs.parallel import DEFAULT_PLACEMENT_LABEL
from paraplan.catalog import load_model, load_system
from paraplan.cli.app import (
    Attention,
    Dtype,
    Recompute,
    Schedule,
    _stdout,
    app,
    parse_tokens,
)
from paraplan.estimate import estimate as run_estimate
from paraplan.export.planfile import load_plan_option
from paraplan.report.render import print_estimate
from paraplan.specs.errors import InputError


def _int_list(text: str | None, option: str) -> tuple[int, ...] | None:
    """'15,16,15' -> (15, 16, 15); InputError naming the option otherwise."""
    if text is None:
        return None
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise InputError(f"{option}: {text!r} is not allowed; give whole numbers separated by commas") from None


@app.command()
def estimate(
    model: Annotated[str, typer.Option("--model", "-m", help="catalog name, or a YAML/JSON file (or a Hugging Face config.json)")],
    system: Annotated[str, typer.Option("--system", "-s", help="catalog name, or a YAML/JSON file")],
    gpus: Annotated[Optional[int], typer.Option("--gpus", min=1, help="total GPUs = tp·pp·cp·dp (required unless --plan)")] = None,
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
    placement: Annotated[str, typer.Option("--placement", help="group order on the network, innermost first")] = DEFAULT_PLACEMENT_LABEL,
    stage_layers: Annotated[
        Optional[str], typer.Option("--stage-layers", help="decoder layers of every pipeline stage, e.g. 15,16,16,...,15")
    ] = None,
    layers_first_stage: Annotated[Optional[int], typer.Option("--layers-first-stage", min=0)] = None,
    layers_last_stage: Annotated[Optional[int], typer.Option("--layers-last-stage", min=0)] = None,
    embedding_as_layer: Annotated[
        bool, typer.Option("--embedding-as-layer", help="count the embedding as a layer when splitting stages")
    ] = False,
    loss_as_layer: Annotated[bool, typer.Option("--loss-as-layer", help="count the LM head and loss as a layer")] = False,
    ep: Annotated[int, typer.Option("--ep", min=1, help="expert-parallel degree (carved out of tp·cp·dp)")] = 1,
    etp: Annotated[int, typer.Option("--etp", min=1, help="expert tensor-parallel degree")] = 1,
    moe_dispatcher: Annotated[str, typer.Option("--moe-dispatcher", help="alltoall | allgather | deepep")] = "alltoall",
    capacity_factor: Annotated[Optional[float], typer.Option("--capacity-factor", help="expert capacity factor (default dropless)")] = None,
    moe_balance: Annotated[str, typer.Option("--moe-balance", help="learned | forced")] = "learned",
    moe_a2a_overlap: Annotated[bool, typer.Option("--moe-a2a-overlap", help="overlap dispatch/combine with compute")] = False,
    recompute_modules: Annotated[
        Optional[str], typer.Option("--recompute-modules", help="selective recompute by module, e.g. mla_up_proj,moe_act")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of tables")] = False,
    ops: Annotated[bool, typer.Option("--ops", help="add the per-op and per-collective tables")] = False,
    tokens: Annotated[Optional[str], typer.Option("--tokens", help="run length in tokens (15e12, 15T, 300B)")] = None,
    price: Annotated[
        Optional[float], typer.Option("--price", min=0.0, help="USD per GPU-hour (default: the system's)")
    ] = None,
    plot: Annotated[
        Optional[Path], typer.Option("--plot", help="also draw the time and memory breakdown to FILE (.png or .svg)")
    ] = None,
    plan_file: Annotated[
        Optional[str], typer.Option("--plan", help="plan from a file: search --json (FILE#N = rank N), an export, or PlanSpec YAML/JSON")
    ] = None,
) -> None:
    """Time, memory and utilisation of one training step under one plan."""
    if plot is not None and plot.suffix.lower() not in (".png", ".svg"):
        raise InputError(f"--plot: {str(plot)!r} is not allowed; the file name must end in .png or .svg")
    model_spec = load_model(model, field="model")
    system_spec = load_system(system, field="system")
    plan = load_plan_option(plan_file, gpus, model_spec, seq_length) if plan_file or gpus is None else plan_from_fields(
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
            "stage_layers": _int_list(stage_layers, "--stage-layers"),
            "layers_first_stage": layers_first_stage,
            "layers_last_stage": layers_last_stage,
            "embedding_as_layer": embedding_as_layer,
            "loss_as_layer": loss_as_layer,
            "ep": ep,
            "etp": etp,
            "moe_dispatcher": moe_dispatcher,
            "capacity_factor": capacity_factor,
            "moe_balance": moe_balance,
            "moe_a2a_overlap": moe_a2a_overlap,
            "recompute_modules": [m for m in recompute_modules.split(",") if m] if recompute_modules else None,
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


