"""pydantic's plugin lookup without its import of importlib.metadata while every plugin is off (issue 31).

pydantic 2 builds each validator through ``pydantic.plugin._schema_validator.create_schema_validator``, which
runs ``from ._loader import get_plugins`` and calls it (pydantic v2.14.4, pydantic/plugin/_schema_validator.py).
``pydantic.plugin._loader`` imports ``importlib.metadata`` at its top (``from importlib.metadata import
entry_points``: email, zipfile, csv, tempfile, ... ~10 ms of a process's CPU), yet its ``get_plugins`` returns
``()`` without touching it while ``PYDANTIC_DISABLE_PLUGINS`` is ``__all__``, ``1`` or ``true``
(pydantic/plugin/_loader.py), as a command sets it (cli.main.command_settings).

:func:`skip_plugin_scan` puts a stand-in module under that name before pydantic first loads it. The stand-in's
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
from typing import Any

LOADER = "pydantic.plugin._loader"
ALL_OFF = (
    "__all__",
    "1",
    "true",
)  # PYDANTIC_DISABLE_PLUGINS values that turn every plugin off (_loader.py)


def skip_plugin_scan() -> None:
    """The stand-in (module doc) as ``pydantic.plugin._loader``, unless pydantic's own is loaded already."""
    if LOADER in sys.modules:
        return
    stand_in = types.ModuleType(
        LOADER, "stand-in for pydantic's plugin loader (paraplan.io.pydantic_plugins)"
    )
    stand_in.get_plugins = _get_plugins
    stand_in.__getattr__ = _real_attribute
    sys.modules[LOADER] = stand_in


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
