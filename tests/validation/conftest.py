"""Fixtures of the validation tests: the report of every bundled case (validate.run.run_cases), run once."""

from __future__ import annotations

import pytest

from paraplan.validate.case_files import load_cases
from paraplan.validate.run import run_cases


@pytest.fixture(scope="session")
def report() -> dict:
    return run_cases(load_cases())
