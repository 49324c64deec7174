"""The entry names of the package's catalog folders (paraplan/catalog/models, systems, frameworks,
...), found with ``find_spec``: no import of paraplan.catalog and its pydantic models, so the CLI's
help can name the catalog's profiles at start-up (issue 31)."""

from __future__ import annotations

from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path


def catalog_folder(kind: str) -> Path:
    """The package's catalog folder ``kind`` (found as the module doc says; importlib.resources' reader of a
    package's files imports zipfile, ~1-5 ms of a search's start-up, issue 31)."""
    spec = find_spec("paraplan.catalog")
    return Path(spec.submodule_search_locations[0]) / kind


@lru_cache(maxsize=None)
def catalog_names(kind: str) -> tuple[str, ...]:
    """The entries of the catalog folder ``kind`` (its ``.yaml`` files' names, sorted; listed once
    per process)."""
    folder = catalog_folder(kind)
    return tuple(
        sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))
    )
