"""Reading input documents and writing result files safely.

Reading (:func:`read_text`, :func:`read_document`): a file is read as bytes up to
``MAX_INPUT_BYTES`` (so ``/dev/zero`` or a multi-gigabyte file is refused at once, not read until
memory runs out), decoded as UTF-8 with an optional byte-order mark, and parsed as JSON or YAML
with strict rules: no duplicate mapping keys, no ``NaN``/``Infinity`` in JSON, at most
``MAX_NESTING`` levels of nesting. ``-`` reads standard input. Every failure is an
:class:`~paraplan.specs.errors.InputError` of one line naming the field and the file.

Writing: a result file is never written in place. :func:`atomic_write_text` and
:func:`atomic_path` write a temporary file beside the target, flush and ``fsync`` it, then
``os.replace`` it over the target (atomic on POSIX), so the target holds either its old content or
the complete new one — a full disk, an exception or a kill in between leaves the user's file as it
was. :func:`append_line` appends one line to a journal and ``fsync``s it before returning.

A SIGKILL between creating the temporary file and the rename leaves it behind (hidden,
``.NAME.PID.XXXXXXXX.tmp``). The next write to the same target removes such leftovers: only names of
exactly that pattern (or the older ``.NAME.XXXXXXXX.tmp``), last modified before this process
imported this module, and — where the name carries the writer's process id — whose writer is no
longer running (a concurrent writer's file is never touched).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from paraplan.io.referenced import (  # noqa: F401 - MAX_INPUT_BYTES and referenced_path re-exported
    MAX_INPUT_BYTES,
    _open_regular,
    referenced_path,
)
from paraplan.io.strict_yaml import MAX_YAML_BYTES, load_strict_yaml
from paraplan.specs.errors import InputError

MAX_NESTING = 64  # levels of nested mappings/lists; our schemas need < 6


def _label(path: Path | str) -> str:
    return "standard input" if str(path) == "-" else repr(str(path))


def read_bytes(path: Path | str, field: str, regular_only: bool = False) -> bytes:
    """At most MAX_INPUT_BYTES of ``path`` (``-`` = stdin); InputError if unreadable or larger. With
    ``regular_only`` (a path a document names, not the user's command line) the file is opened
    without blocking and checked on the open descriptor (``_open_regular``): anything but a regular
    file — a device, a FIFO, a socket, a link to one — is refused before a byte is read."""
    try:
        if str(path) == "-":
            data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        else:
            p = Path(path)
            if p.is_dir():
                raise InputError(f"{field}: {str(p)!r} is a directory; give a file")
            with _open_regular(p, field) if regular_only else p.open("rb") as fh:
                data = fh.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise InputError(
            f"{field}: cannot read file {_label(path)}: {exc.strerror or exc}"
        ) from None
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(
            f"{field}: {_label(path)} is larger than {MAX_INPUT_BYTES // 2**20} MiB; not a paraplan input"
        )
    return data


def read_text(path: Path | str, field: str, regular_only: bool = False) -> str:
    """The file as text: UTF-8, a leading byte-order mark dropped; InputError otherwise."""
    data = read_bytes(path, field, regular_only)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{field}: {_label(path)} is not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start})"
        ) from None


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}; give each key once")
        out[key] = value
    return out


def _json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number paraplan accepts; give a finite value")


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of mappings/lists (iterative: no recursion on hostile input), stops past ``limit``."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if deepest > limit:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


def _nesting_of_text(text: str) -> int:
    """Upper bound of the bracket nesting of a JSON text or a YAML flow collection (cheap pre-check,
    so that a parser never recurses 100,000 levels deep); brackets inside double-quoted strings (backslash
    escapes) do not count, so a JSON note quoting "[a, b)" does not make a file look deep (other brackets count:
    the bound stays an upper one, and the parsed data's own depth is checked after)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
    return deepest


def parse_document(text: str, label: str, field: str, as_json: bool, quiet: bool = False) -> Any:
    """Parse JSON (``as_json``) or YAML strictly; InputError of one line naming ``field`` and ``label``.
    With ``quiet`` (a file a document names, which the user may never have looked at) the error gives
    the position only, never a key, tag or character of the text."""
    kind = "JSON" if as_json else "YAML"
    if not as_json and len(text) > MAX_YAML_BYTES:  # characters >= bytes / 4: checked cheaply first
        if len(text.encode("utf-8")) > MAX_YAML_BYTES:
            raise InputError(
                f"{field}: {label} is larger than {MAX_YAML_BYTES // 2**10} KiB of YAML; not a"
                f" paraplan input (give it as JSON, up to {MAX_INPUT_BYTES // 2**20} MiB)"
            )
    if _nesting_of_text(text) > MAX_NESTING:
        raise InputError(
            f"{field}: {label} nests deeper than {MAX_NESTING} levels; not a paraplan input"
        )
    try:
        if as_json:
            data = json.loads(text, object_pairs_hook=_json_pairs, parse_constant=_json_constant)
        else:
            data = load_strict_yaml(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{field}: {label} is not valid JSON: {exc.msg} (line {exc.lineno})"
        ) from None
    except (ValueError, yaml.YAMLError) as exc:
        raise InputError(
            f"{field}: {label} is not valid {kind}: {_parse_reason(exc, quiet)}"
        ) from None
    except RecursionError:  # pragma: no cover - the bracket pre-check catches flow nesting
        raise InputError(f"{field}: {label} nests too deeply; not a paraplan input") from None
    if _depth(data, MAX_NESTING) > MAX_NESTING:
        raise InputError(
            f"{field}: {label} nests deeper than {MAX_NESTING} levels; not a paraplan input"
        )
    return data


def _parse_reason(exc: Exception, quiet: bool) -> str:
    """Why a text did not parse: the parser's first line, or (``quiet``) its position only."""
    if isinstance(exc, yaml.MarkedYAMLError):
        return _yaml_message(exc, quiet)
    if quiet:
        return "a duplicate key or a value paraplan does not accept"
    return " ".join(str(exc).split("\n")[0:1])


def _yaml_message(exc: yaml.MarkedYAMLError, quiet: bool = False) -> str:
    problem = "a syntax error" if quiet else exc.problem or exc.context or "invalid"
    mark = exc.problem_mark or exc.context_mark
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return f"{problem}{where}"


def read_document(path: Path | str, field: str, referenced: bool = False) -> Any:
    """Read and parse a JSON (``.json``) or YAML file (anything else; JSON is valid YAML too).
    ``referenced``: the path came from a document, not the command line: a regular file only, and a
    parse error names the position, never the content (parse_document's ``quiet``)."""
    text = read_text(path, field, regular_only=referenced)
    as_json = str(path).endswith(".json") or (
        str(path) == "-" and text.lstrip().startswith(("{", "["))
    )
    return parse_document(text, _label(path), field, as_json, quiet=referenced)


# ---- writing ------------------------------------------------------------------------------------
def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


WRITER_START_S = time.time()  # when this process imported the writer: leftovers must be older


def _temp_pattern(name: str) -> re.Pattern:
    """Names of our temporary files for target ``name``: ``.NAME.PID.XXXXXXXX.tmp`` (PID optional: older
    versions wrote ``.NAME.XXXXXXXX.tmp``); XXXXXXXX is tempfile.mkstemp's random part."""
    return re.compile(rf"\.{re.escape(name)}\.(?:(\d+)\.)?[a-z0-9_]{{8}}\.tmp")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process (alive), or not a pid
        return True
    return True


def remove_stale_temps(target: Path | str) -> list[Path]:
    """Delete the temporary files a killed writer left beside ``target`` (see the module docstring for
    which); return them. Errors (a file removed meanwhile, permissions) are ignored."""
    target = Path(target)
    pattern, removed = _temp_pattern(target.name), []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None:
            continue
        try:
            if (
                not entry.is_file(follow_symlinks=False)
                or entry.stat(follow_symlinks=False).st_mtime >= WRITER_START_S
            ):
                continue
            pid = match.group(1)
            if pid is not None and (int(pid) == os.getpid() or _running(int(pid))):
                continue
            os.unlink(entry.path)
        except OSError:
            continue
        removed.append(Path(entry.path))
    return removed


class AtomicTarget:
    """A temporary file beside ``target`` (``.path``) that :meth:`commit` fsyncs and renames over
    ``target`` and :meth:`discard` deletes; ``target`` is untouched until the commit.

    A target that is not a regular file (``/dev/null``, ``/dev/full``, a FIFO) cannot be replaced
    by a rename; it is written through directly (``.path`` is the target itself)."""

    def __init__(self, target: Path | str, field: str = "output"):
        self.target = Path(target)
        self.done = False
        if self.target.exists() and not self.target.is_file():
            if self.target.is_dir():
                raise InputError(f"{field}: {str(self.target)!r} is a directory; give a file name")
            self.path = self.target
            return
        directory = self.target.parent
        if not directory.is_dir():
            raise InputError(f"{field}: directory {str(directory)!r} does not exist")
        remove_stale_temps(self.target)
        try:
            fd, name = tempfile.mkstemp(
                prefix=f".{self.target.name}.{os.getpid()}.", suffix=".tmp", dir=directory
            )
        except OSError as exc:
            raise InputError(
                f"{field}: cannot write in {str(directory)!r}: {exc.strerror or exc}"
            ) from None
        os.close(fd)
        self.path = Path(name)

    def commit(self) -> None:
        if self.done:
            return
        self.done = True
        if self.path == self.target:
            return
        try:
            with self.path.open("rb+") as fh:
                os.fsync(fh.fileno())
            mode = self.target.stat().st_mode & 0o777 if self.target.exists() else 0o666 & ~_umask()
            os.chmod(self.path, mode)
            os.replace(self.path, self.target)
        except BaseException:
            self.discard()
            raise
        _fsync_dir(self.target.parent)

    def discard(self) -> None:
        self.done = True
        if self.path != self.target:
            with contextlib.suppress(OSError):
                self.path.unlink()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(target: Path | str, field: str = "output") -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on normal exit fsync it and rename it over ``target``,
    on an exception delete it (``target`` is left as it was)."""
    staged = AtomicTarget(target, field)
    try:
        yield staged.path
    except BaseException:
        staged.discard()
        raise
    staged.commit()


def atomic_sink(factory, target: Path | str, field: str = "output"):
    """``factory(temporary_path)`` (a writer with a ``close()`` method, such as the search's CSV sink)
    whose ``close()`` renames the temporary file over ``target`` when it is called with no exception
    propagating (the normal end of a ``try``/``finally``), and deletes it otherwise (an error or
    Ctrl-C during the search): the user's old file is never truncated by a failed run."""
    staged = AtomicTarget(target, field)
    outer = sys.exc_info()[1]
    try:
        sink = factory(staged.path)
    except BaseException:
        staged.discard()
        raise
    close = sink.close

    def close_and_commit() -> None:
        close()
        if sys.exc_info()[1] is outer:
            staged.commit()
        else:
            staged.discard()

    sink.close = close_and_commit
    return sink


def atomic_write_text(
    target: Path | str, text: str, field: str = "output", make_parents: bool = False
) -> Path:
    """Write ``text`` (UTF-8) to ``target`` all-or-nothing (temp + fsync + rename), creating its folder first with
    ``make_parents``; the target's path."""
    try:
        if make_parents:
            Path(target).parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(target, field) as tmp:
            with open(tmp, "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
                fh.flush()
    except OSError as exc:
        raise write_error(target, exc, field) from None
    return Path(target)


def append_line(path: Path | str, line: str, field: str = "--out") -> None:
    """Append one line to a journal and fsync it before returning (the line is durable when this
    returns; a kill mid-write leaves at most a torn last line, which readers skip). The journal is
    never reached through a symbolic link (``O_NOFOLLOW``) and must be a regular file: a link planted
    where the journal was would otherwise send the lines wherever it points; InputError instead."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(
                f"{field}: {str(path)!r} is a symbolic link; paraplan appends only to files it created"
            ) from None
        raise write_error(path, exc, field) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError(
                f"{field}: {str(path)!r} is not a regular file; remove it or use another --out"
            )
        data = (line + "\n").encode("utf-8")
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)


def write_error(target: Path | str, exc: OSError, field: str = "output") -> InputError:
    """One line for a failed write (full disk, permissions, ...); the target was left unchanged."""
    return InputError(
        f"{field}: cannot write {str(target)!r}: {exc.strerror or exc}; the file was left unchanged"
    )


__all__ = [
    "MAX_INPUT_BYTES",
    "MAX_NESTING",
    "AtomicTarget",
    "append_line",
    "atomic_path",
    "atomic_sink",
    "atomic_write_text",
    "parse_document",
    "read_bytes",
    "read_document",
    "read_text",
    "remove_stale_temps",
    "write_error",
]
