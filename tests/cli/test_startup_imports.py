"""Start-up stays light: the help of the command line loads no numpy (nor the estimator, the search or rich);
each command imports what it needs when it runs (issue 31: start-up <= 0.2 s, benchmarks/cli_startup.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("numpy", "rich", "yaml", "paraplan.step.estimate", "paraplan.search.run")

_RUNNER = """
import sys
from paraplan.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
sys.stdout.flush()
print("LOADED:", *[m for m in {heavy!r} if m in sys.modules], file=sys.stderr)
"""


def _loaded(*args: str) -> list[str]:
    """The HEAVY modules loaded by ``paraplan ARGS`` in a fresh interpreter."""
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER.format(heavy=HEAVY), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    line = [x for x in proc.stderr.splitlines() if x.startswith("LOADED:")][-1]
    return line.split()[1:]


@pytest.mark.parametrize(
    "args", [("--help",), ("estimate", "--help"), ("search", "--help"), ("validate", "--help")]
)
def test_help_imports_no_numpy(args):
    assert _loaded(*args) == []


@pytest.mark.parametrize("args", [("--help",), ("estimate", "--help"), ("search", "--help")])
def test_help_loads_no_pydantic_model(args):
    # `paraplan --help` loads pydantic neither (issue 31: the plan's choices come from specs.choices, the framework
    # names from the catalog's folder, specs' names load on first use); nor does a command's own help (the group's
    # options left out are not coerced through typer's pydantic adapters: cli.main._absent_options_uncoerced)
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER.replace("{heavy!r}", "list(sys.modules)"), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = [x for x in proc.stderr.splitlines() if x.startswith("LOADED:")][-1].split()[1:]
    command = "search" if args[0] == "--help" else args[0]  # --help alone registers every command
    assert f"paraplan.cli.{command}_cmd" in loaded
    assert [m for m in loaded if m.split(".")[0] in ("pydantic", "pydantic_core")] == []
    assert [m for m in loaded if m in ("paraplan.specs.model", "paraplan.catalog")] == []


def test_the_framework_help_names_the_catalogs_profiles():
    from paraplan.catalog import framework_names
    from paraplan.cli.app import _framework_help

    assert f": {', '.join(framework_names())}, or a YAML" in _framework_help()


def test_the_runner_sees_what_a_command_imports():
    # the same runner reports numpy once a command needs it: the check above can fail
    loaded = _loaded("estimate", "-m", "gpt3-1.3b", "-s", "dgx-a100-80gb", "--gpus", "8", "--json")
    assert "numpy" in loaded and "paraplan.step.estimate" in loaded


def test_a_search_loads_its_own_command_and_no_optional_parts():
    # a command loads its own module of paraplan.cli only; a search of a small dense space without --explain,
    # --set, --csv, --exhaustive or --objective time-to-train loads none of the code those need
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _RUNNER.replace("{heavy!r}", "list(sys.modules)"),
            *("search", "-m", "gpt3-1.3b", "-s", "dgx-a100-80gb", "--gpus", "8"),
            *("--global-batch", "64", "--seq-length", "2048", "--top", "1", "--json"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = set([x for x in proc.stderr.splitlines() if x.startswith("LOADED:")][-1].split()[1:])
    assert "paraplan.search.run" in loaded and "paraplan.cli.search_cmd" in loaded
    unwanted = (
        "paraplan.search.explain",
        "paraplan.sweep",
        "paraplan.goodput",
        "paraplan.cli.estimate_cmd",
        "paraplan.cli.validate_cmd",
        "paraplan.cli.serve_cmd",
        "paraplan.search.bounds.blocks",  # the block search's code: MoE models and spaces over BLOCK_ROWS
        "multiprocessing",
        "paraplan.search.exhaustive",
        "paraplan.report.search_csv",
    )
    assert sorted(loaded & set(unwanted)) == []


def test_every_command_is_named_with_its_module():
    # main.COMMAND_MODULES: the module each command registers from (a run imports that one only)
    import importlib

    import typer

    cli_main = importlib.import_module(
        "paraplan.cli.main"
    )  # the module (paraplan.cli.main is also a function)

    cli_main._register(None)
    commands = {
        c.name or typer.main.get_command_name(c.callback.__name__): c.callback.__module__
        for c in cli_main.app.registered_commands
    }
    commands.update({g.name: "paraplan.cli.import_cmd" for g in cli_main.app.registered_groups})
    assert {k: f"paraplan.cli.{v}" for k, v in cli_main.COMMAND_MODULES.items()} == commands


def test_a_command_collects_every_collect_after_allocations_and_restores_the_thresholds(
    monkeypatch,
):
    # start-up allocates ~100k long-lived objects: main runs the command with the young generation at COLLECT_AFTER
    # (no collection at start-up, issue 31), and gives its caller's thresholds back, on an error too
    import gc
    import importlib

    cli_main = importlib.import_module("paraplan.cli.main")
    seen = []

    def command(args):
        seen.append(gc.get_threshold())
        raise SystemExit(2)

    monkeypatch.setattr(cli_main, "_main", command)
    before = gc.get_threshold()
    with pytest.raises(SystemExit):
        cli_main.main(["models"])
    assert seen == [(cli_main.COLLECT_AFTER, *before[1:])]
    assert gc.get_threshold() == before


def test_a_command_leaves_what_it_allocated_in_the_oldest_generation(monkeypatch):
    # with the 700-allocation threshold back, the next allocation would start a young collection over everything
    # the command allocated (start-up's ~100k objects: 25-60 ms after `paraplan estimate`); command_settings moves
    # it to the oldest generation first (io.collector.promote_to_oldest), on an error too
    import gc
    import importlib

    cli_main = importlib.import_module("paraplan.cli.main")
    kept = []

    def command(args):
        kept.extend([i] for i in range(5_000))  # tracked objects, more than any young threshold
        assert gc.get_count()[0] >= 5_000
        raise SystemExit(2)

    monkeypatch.setattr(cli_main, "_main", command)
    with pytest.raises(SystemExit):
        cli_main.main(["models"])
    assert gc.get_count()[0] < 700 and gc.get_freeze_count() == 0
    # a young collection would have left them in the middle generation
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert all(id(o) in oldest for o in kept)
