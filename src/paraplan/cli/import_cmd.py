"""``paraplan import``: plans from framework exports, and Calculon / AMPeD inputs as paraplan files."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from paraplan.cli.app import app
from paraplan.cli.declare import given, optional, switch

import_app = typer.Typer(
    help="Read other tools' inputs as paraplan plans, models and systems.", no_args_is_help=True
)
app.add_typer(import_app, name="import")


def _emit(data: dict, out: Optional[Path]) -> None:
    from paraplan.io.documents import atomic_write_text

    text = json.dumps(data, indent=2) + "\n"
    if out is None:
        sys.stdout.write(text)
    else:
        atomic_write_text(out, text, make_parents=True)
        print(f"wrote {out}", file=sys.stderr)


@import_app.command("plan")
def import_plan_command(
    file: Annotated[
        str,
        typer.Argument(
            help="a Megatron launch line, NeMo override, torchtitan TOML or DeepSpeed JSON; or a search result FILE#N"
        ),
    ],
    model: optional(
        str, "--model", "-m", help="needed for torchtitan interleaved pipelines"
    ) = None,
    seq_length: optional(int, "--seq-length", help="needed for DeepSpeed configs", min=1) = None,
    out: optional(Path, "--out", "-o", help="write the plan JSON to FILE") = None,
) -> None:
    """A framework's launch arguments back as a paraplan plan (JSON of PlanSpec fields); from a search
    JSON row also the model and system the search names (so ``estimate --plan`` reads them)."""
    from paraplan.catalog import load_model
    from paraplan.export.planfile import check_loaded_plan, load_plan, source_names

    named_model, named_system = source_names(file)
    model_ref = model or named_model
    model_spec = load_model(model_ref, "model", referenced=model is None) if model_ref else None
    plan = load_plan(file, model=model_spec, seq_length=seq_length, field="file")
    check_loaded_plan(plan, model_spec, "file")
    names = {"model": model_ref, "system": named_system}
    _emit({**{k: v for k, v in names.items() if v}, "plan": plan.model_dump()}, out)


@import_app.command("calculon")
def import_calculon_command(
    model: Annotated[Path, typer.Argument(help="Calculon application (model) JSON")],
    system: Annotated[Path, typer.Argument(help="Calculon system JSON")],
    execution: Annotated[Path, typer.Argument(help="Calculon execution JSON")],
    out: optional(Path, "--out", "-o", help="folder for model.yaml, system.yaml, plan.json") = None,
    vocab: given(int, "--vocab", help="vocabulary (Calculon's models have none)", min=1) = 51200,
    sm_count: optional(int, "--sm-count", help="SMs per GPU when not inferable", min=1) = None,
    estimate: switch("--estimate", help="also estimate the step with paraplan") = False,
) -> None:
    """Calculon's model, system and execution files as paraplan inputs; prints what could not be carried."""
    import yaml

    from paraplan.catalog import load_model, load_system
    from paraplan.importers.calculon import convert
    from paraplan.io.documents import atomic_write_text
    from paraplan.specs.plan_fields import plan_from_fields

    conv = convert(model, system, execution, vocab=vocab, sm_count=sm_count)
    model_spec = load_model(conv.model, field="model")
    system_spec = load_system(conv.system, field="system")
    plan = plan_from_fields(conv.plan)
    for note in conv.notes:
        print(f"note: {note}", file=sys.stderr)
    if out is not None:
        head = "# converted by `paraplan import calculon`; notes:\n" + "".join(
            f"#   {n}\n" for n in conv.notes
        )
        atomic_write_text(
            out / "model.yaml",
            head + yaml.safe_dump(conv.model, sort_keys=False),
            make_parents=True,
        )
        atomic_write_text(
            out / "system.yaml",
            head + yaml.safe_dump(conv.system, sort_keys=False),
            make_parents=True,
        )
        atomic_write_text(
            out / "plan.json",
            json.dumps({"plan": plan.model_dump(exclude_defaults=True)}, indent=2) + "\n",
            make_parents=True,
        )
        print(f"wrote {out}/model.yaml, system.yaml, plan.json", file=sys.stderr)
    if estimate:
        from paraplan.step.estimate import estimate as run_estimate

        est = run_estimate(model_spec, system_spec, plan)
        from paraplan.units import GiB

        print(
            f"{model_spec.name} on {system_spec.name}: step {est.step_time_s:.3f} s, MFU {est.mfu:.1%}, "
            f"peak memory {est.peak_stage.peak_bytes / GiB:.1f} GiB ({'fits' if est.fits else 'does not fit'})"
        )
    if out is None and not estimate:
        _emit(
            {
                "model": conv.model,
                "system": conv.system,
                "plan": plan.model_dump(exclude_defaults=True),
            },
            None,
        )


@import_app.command("amped")
def import_amped_command(
    config: Annotated[Path, typer.Argument(help="AMPeD-style config.json")],
    tables: optional(Path, "--lookup-tables", help="lookup_tables.json") = None,
    out: optional(Path, "--out", "-o", help="folder for model.yaml and plan.json") = None,
) -> None:
    """An AMPeD-style configuration as a paraplan model and plan (the system comes from --system later)."""
    import yaml

    from paraplan.catalog import load_model
    from paraplan.importers.amped import convert
    from paraplan.io.documents import atomic_write_text
    from paraplan.specs.plan_fields import plan_from_fields

    model, plan_fields, notes = convert(config, tables)
    load_model(model, field="model")
    plan = plan_from_fields(plan_fields)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if out is None:
        _emit({"model": model, "plan": plan.model_dump(exclude_defaults=True)}, None)
        return
    atomic_write_text(out / "model.yaml", yaml.safe_dump(model, sort_keys=False), make_parents=True)
    atomic_write_text(
        out / "plan.json",
        json.dumps({"plan": plan.model_dump(exclude_defaults=True)}, indent=2) + "\n",
        make_parents=True,
    )
    print(f"wrote {out}/model.yaml, plan.json", file=sys.stderr)
