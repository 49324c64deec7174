"""Option factories: one declaration of an option's type, names and help, for every command's
signature (``name: optional(int, "--x", help="...", min=1) = None``); typer reads the ``Annotated``
type each returns as the option's declaration."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer


def switch(*names: str, help: str | None = None, **settings: Any) -> Any:
    """A boolean option, off unless given: ``name: switch("--flag", help="what it does") = False``."""
    return Annotated[bool, typer.Option(*names, help=help, **settings)]


def optional(kind: Any, *names: str, help: str | None = None, **settings: Any) -> Any:
    """An option of ``kind`` that may be left out (default None), with typer's ``settings`` (min,
    max, ...): ``name: optional(int, "--x", help="...", min=1) = None``."""
    return Annotated[Optional[kind], typer.Option(*names, help=help, **settings)]


def given(kind: Any, *names: str, help: str | None = None, **settings: Any) -> Any:
    """An option of ``kind`` with a default at the command (or required without one):
    ``name: given(int, "--tp", help="...", min=1) = 1``."""
    return Annotated[kind, typer.Option(*names, help=help, **settings)]
