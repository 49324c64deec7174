"""search.run and validate.run split along their seams (issue 31): one row table's scan
(search.row_scan) out of the search's entry and block-by-block search; the case files' schema and
reading (validate.case_files) out of the comparison. Both well under the 500-line limit."""

from __future__ import annotations

from pathlib import Path

import paraplan

ROOT = Path(paraplan.__file__).parent


def _lines(module: str) -> int:
    return len((ROOT / module).read_text(encoding="utf-8").splitlines())


def test_the_run_modules_are_well_under_the_limit():
    assert _lines("search/run.py") < 450
    assert _lines("validate/run.py") < 450


def test_each_half_holds_its_own_names():
    from paraplan.search import row_scan, run
    from paraplan.validate import case_files
    from paraplan.validate import run as validate_run

    assert run.scan_rows is row_scan.scan_rows and "CHUNK_CANDIDATES" not in vars(run)
    assert validate_run.Case is case_files.Case and "load_cases" not in vars(validate_run)
