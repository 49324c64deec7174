"""The cross-validated validation residuals the error bands read (validate.band), computed once and
shipped with the package.

One record per bundled validation case that measured a step time: its name and cross-validation group,
what the band is conditioned on (``features.band_keys``: stack, hardware generation, traits), the knobs
it exercised (``features.plan_features``), and two signed step-time errors (%): ``in_sample_error_pct``
with the shipped constants and ``error_pct`` from leave-one-group-out cross-validation
(``validate.cv.cross_validate``: every constant that acts on the case refitted without its group). The
bands read ``error_pct``, the error of a run the constants never saw.

The cross-validation refits the constants once per group (about a minute), so ``residuals.json`` beside
this module stores the records with a fingerprint of the package's files (``package_fingerprint``).
``validation_residuals`` reads the store when its fingerprint is this package's. When it is stale (the
code, a catalog or a case changed since it was written) the records are re-derived at the cost of one
validation run (``rederived_residuals``): each case's in-sample error now, plus the shift the refit made
to that case when the store was written (``error_pct − in_sample_error_pct``); a case the stale store
lacks takes its in-sample error. Regenerate after a change to the package:

    python -m paraplan.validate.residuals

(tests/validation/test_residual_store.py fails while the stored table is stale.)
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from paraplan.validate.features import BandKeys

PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # src/paraplan
STORE = PACKAGE_ROOT / "validate" / "residuals.json"
FINGERPRINTED_SUFFIXES = (
    ".py",
    ".yaml",
    ".json",
)  # the package's code and data files (pyproject package-data)


@dataclass(frozen=True)
class Residual:
    """One validation case's step-time errors and what a band conditions on (module docstring)."""

    case: str
    group: str
    role: str  # "calibration" | "held_out" (validate.run.case_role)
    keys: BandKeys
    features: tuple[str, ...]
    error_pct: float  # cross-validated: the case's group left out of the fit
    in_sample_error_pct: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "group": self.group,
            "role": self.role,
            "stack": self.keys.stack,
            "generation": self.keys.generation,
            "traits": sorted(self.keys.traits),
            "features": list(self.features),
            "error_pct": self.error_pct,
            "in_sample_error_pct": self.in_sample_error_pct,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Residual:
        keys = BandKeys(str(data["stack"]), str(data["generation"]), frozenset(data["traits"]))
        return cls(
            case=str(data["case"]),
            group=str(data["group"]),
            role=str(data["role"]),
            keys=keys,
            features=tuple(str(f) for f in data["features"]),
            error_pct=float(data["error_pct"]),
            in_sample_error_pct=float(data["in_sample_error_pct"]),
        )


def package_fingerprint() -> str:
    """SHA-256 over the relative path and bytes of every code and data file of the package but the store itself:
    the same on an editable and a wheel install of one source tree. Files in the order of their paths' parts
    (``sorted`` Paths), read with os.scandir and open: ~10 ms (``Path.rglob`` and ``read_bytes`` cost ~20 ms more
    of every process that prints an error band, issue 31)."""
    digest = hashlib.sha256()
    store = os.fspath(STORE)
    for parts in sorted(_code_and_data_files(os.fspath(PACKAGE_ROOT), ())):
        path = os.path.join(PACKAGE_ROOT, *parts)
        if path == store:
            continue
        digest.update("/".join(parts).encode())
        digest.update(b"\0")
        with open(path, "rb") as file:
            digest.update(file.read())
        digest.update(b"\0")
    return digest.hexdigest()


def _code_and_data_files(folder: str, parts: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """The relative parts of the files (or links to files) under ``folder`` with a FINGERPRINTED_SUFFIXES suffix,
    outside __pycache__; links to folders are not followed (as ``Path.rglob``)."""
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir() and not entry.is_symlink():
                if entry.name != "__pycache__":
                    yield from _code_and_data_files(entry.path, (*parts, entry.name))
            elif _suffix(entry.name) in FINGERPRINTED_SUFFIXES and entry.is_file():
                yield (*parts, entry.name)


def _suffix(name: str) -> str:
    """``Path(name).suffix``: from the last dot, unless that dot starts the name or ends it ("..py" has ".py",
    as pathlib says; os.path.splitext says none)."""
    dot = name.rfind(".")
    return name[dot:] if 0 < dot < len(name) - 1 else ""


def residual_records(
    cases: Sequence[Any], entries: Sequence[dict], cv_errors: dict[tuple[str, str], float]
) -> tuple[Residual, ...]:
    """Records of the scored cases (``validate.case_files.Case`` with its ``validate.run.run_case`` entry) that measured a step
    time; ``cv_errors`` maps (group, name) to the cross-validated error, a case missing there takes its
    in-sample error."""
    from paraplan.validate.features import band_keys, plan_features

    out = []
    for case, entry in zip(cases, entries):
        if entry.get("status") != "ok" or "step_time_s" not in entry["error_pct"]:
            continue
        err = entry["error_pct"]["step_time_s"]
        out.append(
            Residual(
                case=case.name,
                group=case.cv_group,
                role=entry["role"],
                keys=band_keys(case.model, case.system, case.plan, case.framework),
                features=plan_features(case.model, case.system, case.plan, case.framework),
                error_pct=cv_errors.get((case.cv_group, case.name), err),
                in_sample_error_pct=err,
            )
        )
    return tuple(out)


def cv_errors_of(cv_report: dict[str, Any]) -> dict[tuple[str, str], float]:
    """(group, case name) → cross-validated step-time error of a ``validate.cv`` report."""
    return {(c["group"], c["name"]): c["cv_error_pct"] for c in cv_report["cases"]}


def _bundled_runs() -> tuple[list[Any], list[dict]]:
    from paraplan.validate.case_files import Case, load_cases
    from paraplan.validate.run import run_case

    cases = [c for c in load_cases() if isinstance(c, Case) and "step_time_s" in c.measured]
    return cases, [run_case(c) for c in cases]


def compute_validation_residuals() -> tuple[Residual, ...]:
    """The records of the bundled cases, with their leave-one-group-out errors (about a minute)."""
    from paraplan.validate.cv import cross_validate

    cases, entries = _bundled_runs()
    ok = [c for c, e in zip(cases, entries) if e["status"] == "ok"]
    return residual_records(cases, entries, cv_errors_of(cross_validate(ok)))


def rederived_residuals(stale: Iterable[Residual]) -> tuple[Residual, ...]:
    """The records from one validation run and a stale store's refit shifts (module docstring)."""
    shift = {(r.group, r.case): r.error_pct - r.in_sample_error_pct for r in stale}
    cases, entries = _bundled_runs()
    now = residual_records(cases, entries, {})
    return tuple(
        replace(r, error_pct=r.in_sample_error_pct + shift.get((r.group, r.case), 0.0)) for r in now
    )


def _stored() -> tuple[str | None, tuple[Residual, ...]] | None:
    """(fingerprint, records) of the store when it exists and parses; else None."""
    try:
        document = json.loads(STORE.read_text(encoding="utf-8"))
        records = tuple(Residual.from_dict(r) for r in document["residuals"])
        return document.get("fingerprint"), records
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return None


def read_store(current_only: bool = True) -> tuple[Residual, ...] | None:
    """The stored records when the store exists, parses and (``current_only``) carries this package's
    fingerprint; else None."""
    stored = _stored()
    if stored is None or (current_only and stored[0] != package_fingerprint()):
        return None
    return stored[1]


def stored_residuals() -> tuple[Residual, ...] | None:
    """The stored records when the store is this package's (``read_store``)."""
    return read_store(current_only=True)


@lru_cache(maxsize=1)
def validation_residuals() -> tuple[Residual, ...]:
    """The records: the store when current, else ``rederived_residuals`` of the stale store (module
    docstring); the store is read once."""
    fingerprint, records = _stored() or (None, ())
    if fingerprint == package_fingerprint():
        return records
    return rederived_residuals(records)


def write_store() -> Path:
    """Compute the records and write them with the package's fingerprint (atomically: paraplan.io.documents)."""
    from paraplan.io.documents import atomic_write_text

    document = {
        "about": "cross-validated validation residuals by case (paraplan.validate.residuals); "
        "regenerate with python -m paraplan.validate.residuals",
        "fingerprint": package_fingerprint(),
        "residuals": [r.to_dict() for r in compute_validation_residuals()],
    }
    atomic_write_text(STORE, json.dumps(document, indent=1) + "\n", field="residuals store")
    return STORE


if __name__ == "__main__":
    print(f"wrote {write_store()}")
