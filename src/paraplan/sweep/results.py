"""A sweep's results: ``sweep.json`` (the document of ``sweep.run.results_document``) and ``sweep.csv`` (one row per point), each written atomically; ``load_results`` reads a saved
``sweep.json`` back (``paraplan plot``)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from paraplan.io.documents import atomic_write_text
from paraplan.specs.errors import InputError
from paraplan.sweep.point import rounded
from paraplan.sweep.schema import csv_columns

JSON_FILE = "sweep.json"


CSV_FILE = "sweep.csv"


# ---- results --------------------------------------------------------------------------------
def write_results(document: dict, out_dir: Path) -> list[Path]:
    """sweep.json and sweep.csv, each written atomically (temporary file, fsync, rename)."""
    json_path, csv_path = out_dir / JSON_FILE, out_dir / CSV_FILE
    atomic_write_text(
        json_path,
        json.dumps(rounded(document), sort_keys=True, indent=2, allow_nan=False) + "\n",
        field="--out",
    )
    write_csv(document, csv_path)
    return [json_path, csv_path]


def write_csv(document: dict, path: Path) -> None:
    """One row per point: swept values, feasibility, metrics, the best plan's knobs, memory, breakdown."""
    sweep = document["sweep"]
    set_paths = [s["path"] for s in sweep["sets"]]
    with_days = sweep.get("tokens") is not None
    columns = csv_columns(set_paths, with_days, sweep.get("goodput") is not None)
    fh = io.StringIO()
    writer = csv.writer(fh, lineterminator="\n")
    writer.writerow([name for name, _ in columns])
    for r in document["points"]:
        writer.writerow(["" if (v := value(r)) is None else v for _, value in columns])
    atomic_write_text(path, fh.getvalue(), field="--out")


def load_results(path: Path) -> dict:
    """A saved sweep.json (for ``paraplan plot``); InputError when it is not one."""
    from paraplan.io.documents import parse_document, read_text

    data = parse_document(
        read_text(path, "sweep.json"), repr(str(path)), "sweep.json", as_json=True
    )
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("points"), list)
        or not isinstance(data.get("sweep"), dict)
    ):
        raise InputError(
            f"sweep.json: {str(path)!r} is not a paraplan sweep result (needs 'sweep' and 'points')"
        )
    for point in data["points"]:
        bad = _negative_time(point)
        if bad is not None:
            raise InputError(
                f"sweep.json: {str(path)!r}: {bad} is not allowed; times and memory must be >= 0"
            )
    return data


def _negative_time(value, path: str = "point") -> str | None:
    """The first negative time (``*_s``) or memory (``*_gib``) value in a record, as 'path = value'."""
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, item in items:
        where = f"{path}.{key}"
        if (
            isinstance(item, (int, float))
            and not isinstance(item, bool)
            and str(key).endswith(("_s", "_gib"))
            and item < 0
        ):
            return f"{where} = {item}"
        found = _negative_time(item, where) if isinstance(item, (dict, list)) else None
        if found:
            return found
    return None
