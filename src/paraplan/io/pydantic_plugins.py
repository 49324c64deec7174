"""pydantic's plugin lookup without its import of importlib.metadata while every plugin is off (issue 31).

pydantic 2 builds each validator through ``pydantic.plugin._schema_validator.create_schema_validator``, which
runs ``from ._loader import get_plugins`` and calls it (pydantic v2.14.4, pydantic/plugin/_schema_validator.py).
``pydantic.plugin._loader`` imports ``importlib.metadata`` at its top (``from importlib.metadata import
entry_points``: email, zipfile, csv, tempfile, ... ~10 ms of a process's CPU), yet its ``get_plugins`` returns
``()`` without touching it while ``PYDANTIC_DISABLE_PLUGINS`` is ``__all__``, ``1`` or ``true``
(pydantic/plugin/_loader.py), as a command sets it (cli.main.command_settings).

:func:`skip_plugin_scan` adds a finder to ``sys.meta_path`` that answers the first import of that module while
every plugin is off with a stand-in (nothing is loaded before pydantic asks for it). The stand-in's
``get_plugins`` gives ``()`` under the same condition, read at each call as pydantic reads it; otherwise, and for
any other name asked of it, it hands over to pydantic's own loader (imported then, in its place from there on):
what pydantic returns is unchanged.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from collections.abc import Iterable
from importlib.machinery import ModuleSpec
from typing import Any

LOADER = "pydantic.plugin._loader"
ALL_OFF = ("__all__", "1", "true")  # PYDANTIC_DISABLE_PLUGINS values that turn every plugin off


class _StandInFinder:
    """Finds and loads the stand-in for LOADER's first import while every plugin is off; answers nothing after
    (it stays in sys.meta_path: the import system walks that list as it is, a finder must not leave it then)."""

    asked = False

    def find_spec(self, name: str, path=None, target=None) -> ModuleSpec | None:
        if name != LOADER or self.asked:
            return None
        self.asked = True
        if os.getenv("PYDANTIC_DISABLE_PLUGINS") not in ALL_OFF:
            return None  # pydantic's own loader
        return ModuleSpec(name, self)

    def create_module(self, spec: ModuleSpec) -> None:
        return None  # a plain module

    def exec_module(self, module: types.ModuleType) -> None:
        module.__doc__ = "stand-in for pydantic's plugin loader (paraplan.io.pydantic_plugins)"
        module.get_plugins = _get_plugins
        module.__getattr__ = _real_attribute


_FINDER = _StandInFinder()


def skip_plugin_scan() -> None:
    """The stand-in's finder (module doc) in front of sys.meta_path, unless pydantic's loader is loaded already
    or the finder is there."""
    if LOADER not in sys.modules and _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def _get_plugins() -> Iterable[Any]:
    if os.getenv("PYDANTIC_DISABLE_PLUGINS") in ALL_OFF:
        return ()
    return _real_loader().get_plugins()


def _real_attribute(name: str) -> Any:
    if name.startswith(
        "__"
    ):  # a module's own attributes (``__path__``, asked by every ``from ... import``)
        raise AttributeError(name)
    return getattr(_real_loader(), name)


def _real_loader() -> types.ModuleType:
    """pydantic's own loader, imported in the stand-in's place."""
    if getattr(sys.modules.get(LOADER), "get_plugins", None) is _get_plugins:
        del sys.modules[LOADER]
    return importlib.import_module(LOADER)
