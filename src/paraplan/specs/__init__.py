"""Validated, frozen inputs: the model, the system and the plan.

The names below load on first use (PEP 562 module ``__getattr__``): a submodule's import (``paraplan.specs.parallel``)
loads no pydantic model, so the command line's ``--help`` stays light (issue 31)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# name -> the submodule that defines it
_EXPORTS = {
    "AcceleratorSpec": "paraplan.specs.system",
    "InputError": "paraplan.specs.errors",
    "ModelSpec": "paraplan.specs.model",
    "NetworkSpec": "paraplan.specs.system",
    "NodeSpec": "paraplan.specs.system",
    "PlanSpec": "paraplan.specs.plan",
    "SystemSpec": "paraplan.specs.system",
    "Violation": "paraplan.specs.errors",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    """Load ``name`` from its submodule on first use and keep it here (a submodule's name, not found here, is
    imported by the import system: ``from paraplan.specs import plan``)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = found = getattr(importlib.import_module(_EXPORTS[name]), name)
    return found


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from paraplan.specs.errors import InputError, Violation
    from paraplan.specs.model import ModelSpec
    from paraplan.specs.plan import PlanSpec
    from paraplan.specs.system import AcceleratorSpec, NetworkSpec, NodeSpec, SystemSpec
