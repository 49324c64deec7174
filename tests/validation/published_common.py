"""What the published-measurement tests share (tests/validation/test_published*.py): the validation report
of every bundled case, run once per session (the ``report`` fixture, tests/validation/conftest.py), and the
helpers that read it."""

from __future__ import annotations

from paraplan.validate.case_files import load_cases

# (name, file stem) of every bundled case, read once at collection (the name sets of the tests are made from it)
CASE_FILES = tuple((c.name, c.file) for c in load_cases())
MOE_NAMES = {name for name, file in CASE_FILES if file == "moe-visible"}


def _cases(report: dict, marker: str) -> list[dict]:
    found = [c for c in report["cases"] if marker in c["source"]]
    assert found, marker
    return found


def _mape(errors: list[float]) -> float:
    return sum(abs(e) for e in errors) / len(errors)
