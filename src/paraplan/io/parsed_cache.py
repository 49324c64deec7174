"""Parsed catalog entries and packaged YAML files kept between processes (issue 31: a search's start-up).

A catalog entry is a YAML file of the package (as are the exporters' argument lists and start-up checks,
:func:`packaged_yaml`); parsing it needs PyYAML, whose import alone is ~10 ms of a
process's CPU (yaml.reader compiles a Unicode-range regex at import), more than the parse. :func:`parsed` keeps
what a parse gave in a user cache folder (:func:`cache_folder`, never the package's folder), one file per
distinct input, named by the SHA-256 of everything that decides the result: the entry's text, the parser's
name (strict or packaged), this Python's
version (marshal's format), the bytes of this package's ``io`` sources (the strict parser and its bounds) and the
installed PyYAML's files (name, size, modification time). An entry the user adds or edits has another text and
so another name: it is parsed afresh; nothing is looked up by file name or date alone.

The files hold the parse as ``marshal`` data (dicts in their order, lists, strings, ints, floats, booleans,
None: exactly what was parsed); a parse marshal cannot hold (a YAML date, a set) is not kept. A folder that
cannot be made or written (read-only, full) only means no file is kept: every failure to read or write the cache
falls back to parsing. A file is written beside its final name and renamed over it (atomic on POSIX), so a
reader never sees a partial one. marshal data is trusted as Python's own bytecode cache is: the folder is the
user's own (``$PARAPLAN_CACHE_DIR``, else ``$XDG_CACHE_HOME/paraplan``, else ``~/.cache/paraplan``).
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sys
from collections.abc import Callable
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any

SUFFIX = ".marshal"


def cache_folder() -> Path | None:
    """Where parsed entries are kept: ``$PARAPLAN_CACHE_DIR/catalog``, else ``$XDG_CACHE_HOME/paraplan/catalog``
    (an absolute path only: the XDG Base Directory Specification has a relative one ignored), else
    ``~/.cache/paraplan/catalog`` (as catalog.hf_cache finds the Hugging Face cache); None where no home
    directory can be found (no HOME and no passwd entry for the user): nothing is kept then."""
    if os.environ.get("PARAPLAN_CACHE_DIR"):
        return Path(os.environ["PARAPLAN_CACHE_DIR"]).expanduser() / "catalog"
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        return Path(xdg) / "paraplan" / "catalog"
    try:
        return Path("~/.cache").expanduser() / "paraplan" / "catalog"
    except (RuntimeError, KeyError):  # pathlib: "Could not determine home directory."
        return None


@lru_cache(maxsize=1)
def parser_stamp() -> bytes:
    """What decides a parse besides the text (module doc): Python's version and marshal's, the bytes of
    every source of this package's ``io`` folder (io.documents, io.strict_yaml, io.yaml_aliases, ...), and
    each file of the installed PyYAML by name, size and modification time (found without importing it)."""
    parts = [sys.version.encode(), str(marshal.version).encode()]
    here = Path(__file__).parent
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            parts += [name.encode(), (here / name).read_bytes()]
    spec = find_spec("yaml")
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            with os.scandir(folder) as entries:
                for entry in sorted(entries, key=lambda e: e.name):
                    if entry.is_file():
                        info = entry.stat()
                        parts.append(f"{entry.name}:{info.st_size}:{info.st_mtime_ns}".encode())
    return b"\0".join(parts)


def entry_key(text: str, parser: str) -> str:
    """The cache file's name for ``text`` read by ``parser`` (without the suffix): the SHA-256 of the parser's
    stamp, its name and the text."""
    head = parser_stamp() + b"\0" + parser.encode() + b"\0"
    return hashlib.sha256(head + text.encode("utf-8")).hexdigest()


def parsed(text: str, parse: Callable[[str], Any], parser: str) -> Any:
    """``parse(text)``, from the cache when an earlier process kept it (module doc), else parsed and kept.
    ``parser`` names what ``parse`` does (the strict reading of a catalog entry, :func:`packaged_yaml`'s):
    one text read two ways is two files. An error of the parse is raised as it is and nothing is kept."""
    try:
        folder = cache_folder()
        path = None if folder is None else folder / (entry_key(text, parser) + SUFFIX)
    except OSError:  # the parser's stamp unreadable: nothing read or kept
        path = None
    if path is None:
        return parse(text)
    try:
        return marshal.loads(path.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):  # none kept yet, or unreadable: parsed again
        pass
    data = parse(text)
    _keep(path, data)
    return data


def packaged_yaml(text: str) -> Any:
    """A YAML data file shipped in the package (trusted, ours: no alias budget or duplicate-key check:
    export/frameworks, export/facts, importers), parsed with libyaml's safe loader when PyYAML was built with
    it (several times faster than the pure-Python one), else the pure-Python SafeLoader; the same data either
    way; kept as :func:`parsed` keeps a catalog entry (a search's launch targets read eleven such files)."""
    return parsed(text, _safe_load, "packaged")


def _safe_load(text: str) -> Any:
    import yaml  # here: a kept file needs no YAML parser

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _keep(path: Path, data: Any) -> None:
    """``data`` as ``path``, written beside it and renamed over it; nothing when it cannot be (module doc)."""
    try:
        blob = marshal.dumps(data)
    except ValueError:  # a value marshal cannot hold: not kept
        return
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(temporary, "wb") as file:
            file.write(blob)
        os.replace(temporary, path)
    except OSError:
        try:
            os.unlink(temporary)
        except OSError:
            pass
