"""paraplan: how fast, and in how much memory, a transformer trains under a parallelization plan.

>>> import paraplan
>>> est = paraplan.estimate("llama3-8b", "dgx-h100-80gb", gpus=8, zero=1)  # doctest: +SKIP
>>> best = paraplan.search("llama3-8b", "dgx-h100-80gb", gpus=64, global_batch=512).best  # doctest: +SKIP

The names of ``__all__`` are loaded on first use (PEP 562 module ``__getattr__``): ``import paraplan`` itself
loads no numpy, pydantic model or estimator, so the command line's ``--help`` stays light (issue 31, 34).
Their documentation is that of :mod:`paraplan.api` and :mod:`paraplan.catalog`.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING

# name -> the module that defines it
_EXPORTS = {
    "estimate": "paraplan.api",
    "search": "paraplan.api",
    "estimate_stages": "paraplan.api",
    "search_problem": "paraplan.api",
    "validate": "paraplan.api",
    "plan_label": "paraplan.api",
    "to_dataframe": "paraplan.api",
    "register_jupyter_views": "paraplan.api",
    "SearchResults": "paraplan.api",
    "load_model": "paraplan.catalog",
    "load_system": "paraplan.catalog",
    "load_framework": "paraplan.catalog",
    "model_names": "paraplan.catalog",
    "system_names": "paraplan.catalog",
    "framework_names": "paraplan.catalog",
    "ModelSpec": "paraplan.specs.model",
    "SystemSpec": "paraplan.specs.system",
    "PlanSpec": "paraplan.specs.plan",
    "Estimate": "paraplan.step.result",
    "InputError": "paraplan.specs.errors",
}

__all__ = ["__version__", *_EXPORTS]  # __version__: from __getattr__, as installed

# API functions whose names are also subpackages: ``paraplan.search`` must stay the package for every import
# (``import paraplan.search.run``, ``from paraplan.search import space``, patches by dotted path) and still be
# callable as ``paraplan.search(...)``, whichever was loaded first
_CALLABLE_PACKAGES = ("search", "validate")


class _CallablePackage(types.ModuleType):
    """The subpackage ``paraplan.search`` (``paraplan.validate``), callable as paraplan.api.search (validate)."""

    def __call__(self, *args, **kwargs):
        function = getattr(importlib.import_module("paraplan.api"), self.__name__.rsplit(".", 1)[1])
        return function(*args, **kwargs)


class _Package(types.ModuleType):
    """``paraplan`` itself: a subpackage of _CALLABLE_PACKAGES set on it by the import system becomes callable."""

    def __setattr__(self, name: str, value) -> None:
        if name in _CALLABLE_PACKAGES and type(value) is types.ModuleType:
            value.__class__ = _CallablePackage
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):
    """Load ``name`` from its module on first use and keep it here; an unknown name raises AttributeError
    naming the closest exports (did you mean ...?)."""
    if name in _CALLABLE_PACKAGES:  # the subpackage, callable (_CallablePackage)
        return importlib.import_module(f"{__name__}.{name}")
    if name == "__version__":  # pyproject.toml's, as installed (cli.app's --version reads it too)
        from importlib.metadata import version

        return version(__name__)
    module = _EXPORTS.get(name)
    if module is None:
        import difflib

        close = difflib.get_close_matches(name, list(_EXPORTS), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise AttributeError(f"module 'paraplan' has no attribute {name!r}{hint}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS) | {"__version__"})


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from paraplan.api import (
        SearchResults,
        estimate,
        plan_label,
        register_jupyter_views,
        search,
        search_problem,
        to_dataframe,
        validate,
    )
    from paraplan.catalog import (
        framework_names,
        load_framework,
        load_model,
        load_system,
        model_names,
        system_names,
    )
    from paraplan.specs.errors import InputError
    from paraplan.specs.model import ModelSpec
    from paraplan.specs.plan import PlanSpec
    from paraplan.specs.system import SystemSpec
    from paraplan.step.result import Estimate
