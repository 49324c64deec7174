"""Test-wide settings.

- Property tests are deterministic (hypothesis derandomized) unless the HYPOTHESIS_PROFILE
  environment variable asks for the "explore" profile (random, more examples).
- The ``slow`` marker: the exhaustive-search comparisons (every candidate through the scalar
  estimator) and the property tests take seconds each; they are marked here, by file or by test
  name, so that ``python -m pytest -m "not slow"`` gives a quick loop while developing. CI
  (``.ci/run``) and the README's test command run every test, the slow ones included.
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir

# hypothesis' example database and caches go to a temporary folder, not ``.hypothesis/`` in the working
# directory: the suite must run from a read-only clone (HYPOTHESIS_STORAGE_DIRECTORY still wins)
if "HYPOTHESIS_STORAGE_DIRECTORY" not in os.environ:
    set_hypothesis_home_dir(tempfile.mkdtemp(prefix="paraplan-hypothesis-"))

# compiled bytecode: where PYTHONDONTWRITEBYTECODE is set (as on the development machine), every
# process the suite starts (the xdist workers, the CLI and documented-command subprocesses, the
# sweep's and the server's workers) compiled again every paraplan module it imported, ~0.2 s of CPU
# each. The bytecode goes to one temporary folder the session's processes share instead
# (sys.pycache_prefix), never into the checkout; a PYTHONPYCACHEPREFIX already set wins.
# BYTECODE: the folder this process made (removed at its end); None in the processes it starts
BYTECODE = None
if os.environ.get("PYTHONDONTWRITEBYTECODE") and "PYTHONPYCACHEPREFIX" not in os.environ:
    BYTECODE = os.environ["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="paraplan-pycache-")
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    sys.pycache_prefix, sys.dont_write_bytecode = BYTECODE, False

# parsed catalog entries (io.parsed_cache) go to a temporary folder the session's processes share, never the
# user's cache; a PARAPLAN_CACHE_DIR already set wins. PARSED: the folder this process made (removed at its end)
PARSED = None
if "PARAPLAN_CACHE_DIR" not in os.environ:
    PARSED = os.environ["PARAPLAN_CACHE_DIR"] = tempfile.mkdtemp(prefix="paraplan-cache-")

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile(
    "explore", derandomize=False, deadline=None, max_examples=500, print_blob=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The cyclic garbage collector: a full (oldest-generation) collection walks every object the
# estimator's and the search's caches hold (~0.6 M per worker midway through the suite, ~1 s each),
# and the default thresholds (700, 10, 10) ran one every ten middle-generation passes: about a
# quarter of a worker's CPU time. The oldest generation is collected after 1,000 such passes instead
# (the younger ones unchanged). No number depends on them; the tests that read them compare with the
# thresholds they found (tests/cli/test_startup_imports.py), and io.collector's pause of a search
# (tests/search/test_search_behaviour.py) turns the collector off whatever they are.
YOUNG, MIDDLE, _ = gc.get_threshold()
gc.set_threshold(YOUNG, MIDDLE, 1000)

SLOW_FILES = ("search/test_exactness.py", "invariants/test_properties.py")
SLOW_NAME_PARTS = ("exhaustive",)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "slow: exhaustive or many-example tests (run in CI too; -m 'not slow' skips them)",
    )


def _module_fixtures(item) -> list[str]:
    """Names of the module-scoped fixtures defined in this test suite that ``item`` uses."""
    info = getattr(item, "_fixtureinfo", None)
    here = Path(__file__).parent
    names = []
    for name, defs in info.name2fixturedefs.items() if info is not None else ():
        fixture = defs[-1]
        source = (
            Path(getattr(fixture.func, "__code__", None).co_filename)
            if hasattr(fixture.func, "__code__")
            else None
        )
        if fixture.scope == "module" and source is not None and source.is_relative_to(here):
            names.append(name)
    return names


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """Mark the slow tests; and put the tests of one module that share a module-scoped fixture in one
    xdist group, so that ``--dist loadgroup`` builds that fixture once, on one worker (ungrouped tests
    are balanced one by one)."""
    here = Path(__file__).parent
    for item in items:
        path = Path(str(item.fspath))
        relative = path.relative_to(here).as_posix() if path.is_relative_to(here) else path.name
        if relative in SLOW_FILES or any(part in item.name for part in SLOW_NAME_PARTS):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("xdist_group") is None and _module_fixtures(item):
            item.add_marker(pytest.mark.xdist_group(f"module-fixture:{relative}"))


def pytest_unconfigure(config):
    """One full collection, then what is left frozen: pytest's session clean-up (its
    unraisable-exception check, after this hook) collects five times more, each walking every cached
    object again (~5 s per worker at the end of the suite); what those would find was collected here,
    with pytest's hook still in place, and objects made after the freeze are still collected there."""
    gc.collect()
    gc.freeze()
    if BYTECODE is not None:  # the workers and subprocesses have ended
        shutil.rmtree(BYTECODE, ignore_errors=True)
    if PARSED is not None:
        shutil.rmtree(PARSED, ignore_errors=True)


@pytest.fixture()
def cli(capsys, monkeypatch):
    """``cli(*argv)`` runs ``paraplan *argv`` in-process on a 200-column console (wide enough that rich keeps
    every table cell on one line) and returns (exit code, stdout, stderr)."""
    from paraplan.cli import main

    monkeypatch.setenv("COLUMNS", "200")

    def run(*argv: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as exit_info:
            main(list(argv))
        out, err = capsys.readouterr()
        code = exit_info.value.code
        return (0 if code is None else code), out, err

    return run


@pytest.fixture(scope="session")
def small_problem():
    """``small_problem(**fields)``: the small search several files run, gpt3-1.3b on 8 A100 80 GB (global
    batch 32, sequence 2048, no recomputation, placements not varied), ``fields`` over these."""
    from paraplan.catalog import load_model, load_system
    from paraplan.search.space import SearchProblem

    def make(**fields):
        base = {
            "model": load_model("gpt3-1.3b"),
            "system": load_system("dgx-a100-80gb"),
            "gpus": 8,
            "global_batch": 32,
            "seq_length": 2048,
            "recompute": ("none",),
            "vary_placement": False,
        }
        return SearchProblem(**{**base, **fields})

    return make
