"""``paraplan export``: a plan as Megatron-LM / NeMo 2.0 / torchtitan / DeepSpeed launch arguments."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from paraplan.cli.app import FrameworkOption, app
from paraplan.cli.declare import given, optional
from paraplan.specs.errors import InputError

# GPUs per host of the launch line when not given: 8 (DGX/HGX servers). Rack-scale NVLink domains
# (GB200 NVL72: 4 GPUs per compute tray) need --gpus-per-node.
DEFAULT_GPUS_PER_NODE = 8


@app.command("export")
def export_command(
    plan: Annotated[
        str,
        typer.Argument(
            help="search --json / estimate --json output, an export, or a plan YAML/JSON; FILE#N picks rank N"
        ),
    ],
    to: given(
        str, "--to", help="megatron | nemo | megatron-bridge | torchtitan | deepspeed | all"
    ) = "megatron",
    rank: optional(int, "--rank", help="rank of a search result (default 1)", min=1) = None,
    model: optional(
        str,
        "--model",
        "-m",
        help="add the model's shape (Megatron) / layers per stage (torchtitan)",
    ) = None,
    system: optional(str, "--system", "-s", help="take GPUs per node from this system") = None,
    gpus_per_node: optional(
        int,
        "--gpus-per-node",
        help="launcher node size (default: the system's NVLink domain up to 8, else 8)",
        min=1,
    ) = None,
    seq_length: optional(
        int, "--seq-length", help="for a DeepSpeed config read as input", min=1
    ) = None,
    out: optional(Path, "--out", "-o", help="write to FILE (with --to all: a folder)") = None,
    framework: FrameworkOption = None,
) -> None:
    """Write a plan as the arguments a training framework takes; refuse (exit 2) a knob it cannot express.
    With --to all, every framework that can run the plan is written and the others' refusals listed
    (exit 0 when at least one was written). A search JSON's model, system and framework profile (its fp8
    recipe) are the defaults."""
    from paraplan.catalog import load_framework, load_model, load_system
    from paraplan.export import FRAMEWORKS, SUFFIX, export_plan
    from paraplan.export.planfile import (
        check_loaded_plan,
        load_plan,
        source_framework,
        source_names,
    )
    from paraplan.io.documents import atomic_write_text

    targets = FRAMEWORKS if to == "all" else (to,)
    if to != "all" and to not in FRAMEWORKS:
        raise InputError(f"--to: {to!r} is not allowed; allowed: {', '.join(FRAMEWORKS)}, all")
    named_model, named_system = source_names(plan)
    model_ref = model or named_model
    # a model / system the plan file names (not the command line) is reported by path and reason only
    model_spec = load_model(model_ref, "model", referenced=model is None) if model_ref else None
    system_ref = system or named_system
    if gpus_per_node is None and system_ref:
        sys_spec = load_system(system_ref, "system", referenced=system is None)
        gpus_per_node = min(sys_spec.node.gpus_per_domain, DEFAULT_GPUS_PER_NODE)
    profile_ref = framework or source_framework(plan)
    profile = (
        load_framework(
            profile_ref, "--framework" if framework else "framework", referenced=framework is None
        )
        if profile_ref
        else None
    )
    plan_spec = load_plan(plan, rank, model=model_spec, seq_length=seq_length, field="PLAN")
    check_loaded_plan(plan_spec, model_spec, "PLAN")
    header = (
        f"paraplan plan {plan}"
        + (f" rank {rank}" if rank else "")
        + (f", model {model_spec.name}" if model_spec else "")
    )
    from paraplan.export import ExportRefused

    texts, refused = {}, []
    for fw in targets:
        try:
            texts[fw] = export_plan(
                fw,
                plan_spec,
                model_spec,
                gpus_per_node or DEFAULT_GPUS_PER_NODE,
                header,
                profile.fp8_recipe if profile is not None else None,
            )
        except ExportRefused as exc:
            if to != "all":
                raise
            refused.append(f"{fw}: {exc}")
    if to == "all" and out is not None:
        for fw, text in texts.items():
            print(
                f"wrote {atomic_write_text(out / f'plan-{fw}{SUFFIX[fw]}', text, make_parents=True)}",
                file=sys.stderr,
            )
        _report_refused(refused, len(texts))
        return
    if out is not None:
        atomic_write_text(out, texts[targets[0]], make_parents=True)
        print(f"wrote {out}", file=sys.stderr)
        return
    for fw, text in texts.items():
        if len(texts) > 1:
            print(f"==> {fw}")
        sys.stdout.write(text)
    _report_refused(refused, len(texts))


def _report_refused(refused: list[str], written: int) -> None:
    """With --to all: one line per refusing framework on stderr; exit 0 when at least one framework
    was written (the refusals are the answer for the others), 2 when every one refused."""
    for line in refused:
        print(f"{'refused' if written else 'error'}: {line}", file=sys.stderr)
    if refused and not written:
        raise typer.Exit(2)
