"""A model named by its Hugging Face id (``--model Qwen/Qwen3-8B``), read from the local Hugging Face cache,
offline: paraplan never downloads anything.

The cache layout is huggingface_hub's (``file_download.py``, huggingface_hub 0.20+): under the hub cache
folder, ``models--{org}--{name}/refs/main`` holds the commit of the ``main`` branch and
``models--{org}--{name}/snapshots/{commit}/config.json`` the file at that commit. The hub cache folder is,
as huggingface_hub's ``constants.py`` resolves it: ``HF_HUB_CACHE``, else ``HUGGINGFACE_HUB_CACHE``, else
``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``.

The snapshot read is the one ``refs/main`` names; without it, the only snapshot holding a config.json. With
several and no ``refs/main`` the id is ambiguous and refused, listing the revisions (give the snapshot's
folder instead).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from paraplan.specs.errors import InputError

# a repository id: org/name, each part letters, digits, '-', '_', '.' (huggingface_hub validate_repo_id)
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.\-]{0,95}$")


def is_hub_id(ref: str) -> bool:
    """True when ``ref`` is shaped like a Hugging Face repository id (``org/name``, no file suffix)."""
    return bool(HUB_ID.match(ref)) and ".." not in ref and not ref.endswith((".json", ".yaml"))


def hub_cache() -> Path:
    """The hub cache folder, resolved as huggingface_hub does (module docstring)."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(xdg) / "huggingface" / "hub"


def cached_config(repo_id: str, field: str = "model") -> Path | None:
    """The cached config.json of ``repo_id`` (module docstring), None when the cache has no copy of that
    repository; InputError when it has several snapshots and no ``refs/main`` to choose one."""
    repo = hub_cache() / ("models--" + repo_id.replace("/", "--"))
    if not repo.is_dir():
        return None
    ref = repo / "refs" / "main"
    if ref.is_file():
        commit = ref.read_text(encoding="utf-8").strip()
        config = repo / "snapshots" / commit / "config.json"
        if config.is_file():
            return config
    snapshots = repo / "snapshots"
    found = sorted(p.parent for p in snapshots.glob("*/config.json")) if snapshots.is_dir() else []
    if len(found) > 1:
        raise InputError(
            f"{field}: {repo_id!r} has {len(found)} cached revisions with a config.json "
            f"({', '.join(p.name[:12] for p in found)}) and no refs/main; give the snapshot folder"
        )
    return found[0] / "config.json" if found else None


def not_cached(repo_id: str, field: str = "model") -> InputError:
    """The one-line error for a Hugging Face id the local cache does not hold."""
    return InputError(
        f"{field}: {repo_id!r} is not a catalog name, a file, or a model in the local Hugging Face cache "
        f"({hub_cache()}); paraplan reads offline: fetch its config first "
        f"(`huggingface-cli download {repo_id} config.json`), or give the path of a config.json"
    )
