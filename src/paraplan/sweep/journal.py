"""The sweep's output directory: its lock, ``config.json`` and the ``points.jsonl`` journal.

Rules (issue 13, "lost or half-written data"):
- one sweep writes into a directory at a time: an exclusive ``flock`` on ``LOCK_FILE`` is held for
  the whole run (released by the kernel if the process dies, so a killed sweep never leaves a
  stale lock); a second sweep is refused with one line;
- a directory that already holds files is used only with ``resume`` (continue that sweep) or
  ``force`` (start again, replacing its files);
- the journal is append-only: each record is one line, written with ``O_APPEND`` and fsync'ed
  before the point counts as finished; it is never truncated or rewritten on ``--resume``;
- a record is matched to its point by ``key``, a hash of the whole point; a line that is torn,
  not JSON, of another point or sweep, or missing fields, is skipped (its point is searched again).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from paraplan.io.documents import MAX_INPUT_BYTES, append_line, atomic_write_text
from paraplan.step.result import MEMORY_PARTS
from paraplan.specs.errors import InputError

POINTS_FILE = "points.jsonl"
CONFIG_FILE = "config.json"
LOCK_FILE = ".paraplan-sweep.lock"
MAX_JOURNAL_BYTES = 64 * MAX_INPUT_BYTES  # 1 GiB: far above any sweep's journal (a record is ~5 kB)

# fields every record has, with the types a record written by run_point gives them
_RECORD_TYPES: dict[str, tuple[type, ...]] = {
    "index": (int,),
    "key": (str,),
    "feasible": (bool,),
    "top": (list,),
    "reason": (str, type(None)),
    "plan": (dict, type(None)),
    "plan_label": (str, type(None)),
    "memory": (dict, type(None)),
    "breakdown": (dict, type(None)),
    "nearest_miss": (dict, type(None)),
    "search": (dict, type(None)),
    "step_time_s": (int, float, type(None)),
    "tokens_per_s": (int, float, type(None)),
    "mfu": (int, float, type(None)),
    "hfu": (int, float, type(None)),
    "global_batch": (int, type(None)),
    "set_si": (dict,),
}
_MEMORY_KEYS = ("peak_gib", "capacity_gib", *(f"{part.key}_gib" for part in MEMORY_PARTS))


def dumps(data) -> str:
    """Canonical one-line JSON (sorted keys, no NaN/Infinity)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)


@contextlib.contextmanager
def locked(out_dir: Path) -> Iterator[None]:
    """Create ``out_dir`` and hold an exclusive lock on it; InputError if another sweep holds it."""
    import fcntl

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(out_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as exc:
        raise InputError(f"--out: cannot create {str(out_dir)!r}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise InputError(
                f"--out: another sweep is writing into {str(out_dir)!r}; wait for it or use another --out"
            ) from None
        yield
    finally:
        os.close(fd)  # releases the lock


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_UNIT_SHARES = ("mfu", "hfu")  # fractions of the peak: 0..1
_NON_NEGATIVE = ("_s", "_gib", "_bytes", "_per_s", "_usd", "_days")  # key endings of amounts


MAX_DEPTH = 32  # nesting a record may have (deeper is no record run_point wrote)
_TOO_DEEP = object()


def leaves(
    value, key: str = "", path: str = "", depth: int = 0
) -> Iterator[tuple[str, str, object]]:
    """(path, key, leaf) of each value that is no dict, list or tuple, depth first (``key``: the
    nearest dict key above it; ``path``: 'a.0.b'); ``_TOO_DEEP`` below MAX_DEPTH levels."""
    if depth > MAX_DEPTH:
        yield path, key, _TOO_DEEP
        return
    if isinstance(value, dict):
        items = ((str(k), str(k), v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((key, str(i), v) for i, v in enumerate(value))
    else:
        yield path, key, value
        return
    for k, step, v in items:
        yield from leaves(v, k, f"{path}.{step}" if path else step, depth + 1)


def _possible(value, key: str) -> bool:
    """A leaf run_point could have written: finite (an integer too, at most float range), a
    utilisation in 0..1, a time, size or rate (by its key's ending) >= 0."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return True
    if not isinstance(value, (int, float)):
        return False
    if not (isinstance(value, float) and math.isfinite(value)) and not (
        isinstance(value, int) and abs(value) <= 2**1023
    ):
        return False
    if key in _UNIT_SHARES and not 0.0 <= value <= 1.0:
        return False
    return value >= 0 or not key.endswith(_NON_NEGATIVE)


def _possible_numbers(record) -> bool:
    """Every number in a journal record could have been written by run_point (``_possible``). A
    record that fails is searched again (issue 37: a journal line with ``mfu: 10**400`` reached
    sweep.json)."""
    return all(_possible(v, k) for _, k, v in leaves(record))


def valid_record(record, task: dict, key: str) -> bool:
    """True when ``record`` is a complete record of ``task`` (as run_point writes it), every number
    in it possible (``_possible_numbers``)."""
    if (
        not isinstance(record, dict)
        or record.get("key") != key
        or record.get("index") != task["index"]
        or not _possible_numbers(record)
    ):
        return False
    for name, types in _RECORD_TYPES.items():
        value = record.get(name, ...)
        if (
            value is ...
            or isinstance(value, bool) != (bool in types)
            or not isinstance(value, types)
        ):
            return False
    if any(record.get(k) != v for k, v in task["swept"].items()):
        return False
    if record["feasible"]:
        memory, breakdown = record["memory"], record["breakdown"]
        if not (
            isinstance(memory, dict)
            and isinstance(breakdown, dict)
            and isinstance(record["plan"], dict)
        ):
            return False
        if not all(_is_number(memory.get(k)) for k in _MEMORY_KEYS) or not all(
            _is_number(v) for v in breakdown.values()
        ):
            return False
        if not all(_is_number(record[k]) for k in ("step_time_s", "tokens_per_s", "mfu")):
            return False
    miss = record["nearest_miss"]
    if miss is not None and not (
        isinstance(miss.get("memory"), dict)
        and all(_is_number(miss["memory"].get(k)) for k in _MEMORY_KEYS)
    ):
        return False
    return True


def read_points(path: Path, tasks: list[dict], keys: list[str]) -> dict[int, dict]:
    """Finished records in the journal by point index (the last valid record of a point wins)."""
    done: dict[int, dict] = {}
    if not path.exists():
        return done
    if path.stat().st_size > MAX_JOURNAL_BYTES:
        raise InputError(
            f"--resume: {str(path)!r} is larger than {MAX_JOURNAL_BYTES // 2**30} GiB; not a paraplan journal"
        )
    by_key = {key: task for key, task in zip(keys, tasks)}
    for raw in path.read_bytes().split(b"\n"):
        try:
            record = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
        except (UnicodeDecodeError, ValueError, RecursionError):
            continue
        task = (
            by_key.get(record.get("key"))
            if isinstance(record, dict) and isinstance(record.get("key"), str)
            else None
        )
        if task is not None and valid_record(record, task, record["key"]):
            done[task["index"]] = record
    return done


def _no_constant(name: str):
    raise ValueError(name)


def is_empty(out_dir: Path) -> bool:
    return not out_dir.exists() or not any(p.name != LOCK_FILE for p in out_dir.iterdir())


def open_output(
    out_dir: Path,
    config_record: dict,
    tasks: list[dict],
    keys: list[str],
    resume: bool,
    force: bool,
) -> dict[int, dict]:
    """Prepare a locked ``out_dir``: with ``resume`` return the points already finished there
    (InputError when it holds a different sweep); otherwise refuse a non-empty directory unless
    ``force``, and start an empty journal."""
    config_path, points_path = out_dir / CONFIG_FILE, out_dir / POINTS_FILE
    if not resume and not force and not is_empty(out_dir):
        raise InputError(
            f"--out: {str(out_dir)!r} is not empty; add --resume to continue the sweep in it, "
            "--force to replace its results, or choose another --out"
        )
    current = json.loads(dumps(config_record))
    done: dict[int, dict] = {}
    _refuse_links(config_path, points_path)
    if resume and config_path.exists():
        try:
            saved = json.loads(config_path.read_bytes()[: MAX_INPUT_BYTES + 1].decode("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            saved = None
        if saved != current:
            differs = _first_difference(saved, current)
            raise InputError(
                f"--resume: {str(out_dir)!r} holds a different sweep ({differs} differs); "
                "use another --out, or --force to replace it"
            )
        done = read_points(points_path, tasks, keys)
    atomic_write_text(
        config_path, json.dumps(current, sort_keys=True, indent=2) + "\n", field="--out"
    )
    if resume and points_path.exists():
        _end_torn_line(points_path)
    else:
        atomic_write_text(points_path, "", field="--out")
    return done


def _refuse_links(*paths: Path) -> None:
    """The output folder's files are paraplan's own: a symbolic link (or a FIFO, a device) planted
    in their place is refused, never followed (issue 37: --resume appended through a linked journal)."""
    for path in paths:
        if path.is_symlink() or (path.exists() and not path.is_file()):
            raise InputError(
                f"--out: {str(path)!r} is not a regular file (a symbolic link?); paraplan does not"
                " follow links in its output folder: remove it or use another --out"
            )


def _end_torn_line(path: Path) -> None:
    """Terminate a torn last line (a write cut by a kill), so the next record starts a line of its own."""
    with path.open("rb") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell() == 0:
            return
        fh.seek(-1, os.SEEK_END)
        last = fh.read(1)
    if last != b"\n":
        append_line(path, "")


def _first_difference(saved, current) -> str:
    if not isinstance(saved, dict):
        return CONFIG_FILE
    for part in ("sweep", "specs"):
        a, b = saved.get(part), current.get(part)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                if a.get(k) != b.get(k):
                    return k if part == "sweep" else f"{k} spec"
        return part
    return CONFIG_FILE


class PointWriter:
    """Appends each finished record to the journal (fsync'ed) before reporting it finished."""

    def __init__(self, path: Path, on_point: Callable[[dict], None] | None):
        self.path = path
        self.on_point = on_point
        self.records: dict[int, dict] = {}

    def __call__(self, record: dict) -> None:
        line = dumps(record)
        append_line(self.path, line)
        self.records[record["index"]] = json.loads(line)
        if self.on_point is not None:
            self.on_point(record)
