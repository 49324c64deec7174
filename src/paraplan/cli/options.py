"""Option declarations several commands share, each with its one help text (``typer`` reads an
``Annotated`` alias as the declaration; the parameter's default stays at the command)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from paraplan.cli.app import Attention, Dtype

ModelOption = Annotated[
    str,
    typer.Option(
        "--model", "-m", help="catalog name, or a YAML/JSON file (or a Hugging Face config.json)"
    ),
]
SeqLengthOption = Annotated[int, typer.Option("--seq-length")]
GlobalBatchOption = Annotated[
    Optional[int], typer.Option("--global-batch", help="sequences per step")
]
MaxGlobalBatchOption = Annotated[
    Optional[int],
    typer.Option(
        "--max-global-batch",
        help="instead of --global-batch: largest multiple of dp·micro_batch not above it",
    ),
]
DtypeOption = Annotated[Dtype, typer.Option("--dtype")]
AttentionOption = Annotated[Attention, typer.Option("--attention")]
PriceOption = Annotated[
    Optional[float],
    typer.Option("--price", min=0.0, help="USD per GPU-hour (default: the system's)"),
]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON instead of tables")]
