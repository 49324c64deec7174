"""``paraplan import``: plans from framework exports, and Calculon / AMPeD inputs as paraplan files."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from paraplan.cli.app import app

import_app = typer.Typer(help="Read other tools' inputs as paraplan plans, models and systems.", no_args_is_help=True)
app.add_typer(import_app, name="import")


def _emit(data: dict, out: Optional[Path]) -> None:
    from paraplan.fileio import write_text_atomic

    text = json.dumps(data, indent=2) + "\n"
    if out is None:
        sys.stdout.write(text)
    else:
        write_text_atomic(out, text)
        print(f"wrote {out}", file=sys.stderr)


@import_app.command("plan")
def import_plan_command(
    file: Annotated[str, typer.Argument(help="a Megatron launch line, NeMo override, torchtitan TOML or DeepSpeed JSON; or a search result FILE#N")],
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="needed for torchtitan interleaved pipelines")] = None,
    seq_length: Annotated[Optional[int], typer.Option("--seq-length", min=1, help="needed for DeepSpeed configs")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="write the plan JSON to FILE")] = None,
) -> None:
    """A framework's launch arguments back as a paraplan plan (JSON of PlanSpec fields)."""
    from paraplan.catalog import load_model
    from paraplan.export.planfile import load_plan

    model_spec = load_model(model, field="model") if model else None
    plan = load_plan(file, model=model_spec, seq_length=seq_length, field="file")
    _emit({"plan": plan.model_dump()}, out)
