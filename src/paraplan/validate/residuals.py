"""The validation residuals the error bands read (validate.band), computed once and shipped with the package.

Every estimate and search table shows a band from the signed step-time errors of the bundled validation
cases, by feature. Running those cases takes ~1 s, which every `paraplan estimate` / `search` paid. The
residuals are a pure function of the package's files (the cost model, catalogs and case files), so
``residuals.json`` beside this module stores them with a fingerprint of those files (``package_fingerprint``):
``validation_residuals`` reads the stored table when its fingerprint is this package's and computes it
otherwise, so a changed model never shows a stale band. Regenerate after a change to the package:

    python -m paraplan.validate.residuals

(tests/validation/test_residual_store.py fails while the stored table is stale.)
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # src/paraplan
STORE = Path(__file__).with_name("residuals.json")
FINGERPRINTED_SUFFIXES = (
    ".py",
    ".yaml",
    ".json",
)  # the package's code and data files (pyproject package-data)


def package_fingerprint() -> str:
    """SHA-256 over the relative path and bytes of every code and data file of the package but the store itself:
    the same on an editable and a wheel install of one source tree (~15 ms)."""
    digest = hashlib.sha256()
    files = sorted(
        p
        for p in PACKAGE_ROOT.rglob("*")
        if p.suffix in FINGERPRINTED_SUFFIXES
        and p.is_file()
        and p != STORE
        and "__pycache__" not in p.parts
    )
    for path in files:
        digest.update(path.relative_to(PACKAGE_ROOT).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def compute_validation_residuals() -> dict[str, tuple[float, ...]]:
    """Signed step-time errors (%) of the bundled validation cases that ran, by feature (validate.band.plan_features),
    by population (band.KIND_KEY) and by model kind (band.ANY_FRAMEWORK_KEY)."""
    from paraplan.validate.features import (
        ANY_FRAMEWORK_KEY,
        KIND_KEY,
        case_population,
        model_kind,
        plan_features,
    )
    from paraplan.validate.run import Case, load_cases, run_case

    out: dict[str, list[float]] = {}
    for case in load_cases():
        if not isinstance(case, Case) or "step_time_s" not in case.measured:
            continue
        entry = run_case(case)
        if entry["status"] != "ok":
            continue
        err = entry["error_pct"]["step_time_s"]
        for feature in plan_features(case.model, case.system, case.plan, case.framework):
            out.setdefault(feature, []).append(err)
        out.setdefault(KIND_KEY + case_population(case.model, case.framework), []).append(err)
        out.setdefault(ANY_FRAMEWORK_KEY + model_kind(case.model), []).append(err)
    return {k: tuple(v) for k, v in out.items()}


def stored_residuals() -> dict[str, tuple[float, ...]] | None:
    """The stored table when the store exists, parses and carries this package's fingerprint; else None."""
    try:
        document = json.loads(STORE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict) or document.get("fingerprint") != package_fingerprint():
        return None
    table = document.get("residuals")
    if not isinstance(table, dict):
        return None
    return {str(k): tuple(float(e) for e in v) for k, v in table.items()}


@lru_cache(maxsize=1)
def validation_residuals() -> dict[str, tuple[float, ...]]:
    """The residual table: stored_residuals when current, else compute_validation_residuals."""
    stored = stored_residuals()
    return stored if stored is not None else compute_validation_residuals()


def write_store() -> Path:
    """Compute the table and write it with the package's fingerprint (atomically: paraplan.io.documents)."""
    from paraplan.io.documents import atomic_write_text

    document = {
        "about": "validation residuals by feature (paraplan.validate.residuals); regenerate with "
        "python -m paraplan.validate.residuals",
        "fingerprint": package_fingerprint(),
        "residuals": {k: list(v) for k, v in sorted(compute_validation_residuals().items())},
    }
    atomic_write_text(STORE, json.dumps(document, indent=1) + "\n", field="residuals store")
    return STORE


if __name__ == "__main__":
    print(f"wrote {write_store()}")
