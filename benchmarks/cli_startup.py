"""Start-up of the command line: process CPU seconds of ``paraplan --help`` and ``paraplan estimate --help`` in
fresh interpreters (target, issue 31: <= 0.2 s, and no numpy), beside a bare ``python -c pass`` and the imports and
catalog entries a search loads before its work starts (the process ends there, as a command ends: ``SEARCH_START``).

Prints the least CPU seconds (user + system) and wall seconds of N runs, cold (no bytecode cache: the first run
after an install) and warm (with one: every later run, what the target is judged on), and the heavy modules
``--help`` imports (none expected: the commands load numpy, the estimator, the search and rich when they run;
tests/cli/test_startup_imports.py). Usage: ``python benchmarks/cli_startup.py [--runs N] [--markdown] [--bytecode]``.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time

from _process_cpu import no_bytecode, process_cpu, run_python, use_bytecode
from _table import print_table

TARGET_S = 0.2
HEAVY = (
    "numpy",
    "matplotlib",
    "rich",
    "yaml",
    "pandas",
    "paraplan.step.estimate",
    "paraplan.search.run",
)
# what `paraplan search` imports and reads before it searches (the catalog entries of the README's search),
# under the settings `main` runs a command with (cli.main.command_settings: no collection of start-up's objects,
# no pydantic plugin scan, one OpenBLAS thread); the process ends where the search would start its work, with
# what ends a command (os._exit, cli.main.console_main): no interpreter teardown (~45 ms) and no collection of
# start-up's ~100k objects on leaving the settings (~12 ms), neither of which a search pays (it moves them to the
# oldest generation without one, io.collector.cyclic_gc_paused)
SEARCH_START = (
    "import os\n"
    "from paraplan.cli.main import command_settings, main\n"
    "with command_settings():\n"
    "    import paraplan.search.run, paraplan.report.search_view\n"
    "    from paraplan.catalog import load_model, load_system\n"
    "    load_model('gpt3-175b'); load_system('dgx-a100-80gb')\n"
    "    os._exit(0)"
)


def python_cpu(code: str, runs: int) -> tuple[float, float]:
    """(least CPU s, least wall s) of ``python -c CODE``."""
    best_cpu = best_wall = float("inf")
    run_python(["-c", code])  # fills the bytecode cache (with --bytecode)
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        run_python(["-c", code])
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        best_cpu, best_wall = min(best_cpu, cpu), min(best_wall, wall)
    return best_cpu, best_wall


def heavy_modules(*args: str) -> list[str]:
    code = (
        "import sys\nfrom paraplan.cli.main import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        f"print('HEAVY:', *[m for m in {HEAVY!r} if m in sys.modules])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
    )
    return [x for x in proc.stdout.splitlines() if x.startswith("HEAVY:")][-1].split()[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument(
        "--bytecode",
        action="store_true",
        help="warm only: with a bytecode cache (_process_cpu.use_bytecode); default: cold and warm",
    )
    args = parser.parse_args()
    modes = {"warm": use_bytecode} if args.bytecode else {"cold": no_bytecode, "warm": use_bytecode}
    figures: dict[str, list[str]] = {}
    for mode, use in modes.items():
        use()
        cpu, wall = python_cpu("pass", args.runs)
        figures.setdefault("python -c pass", []).extend([f"{cpu:.3f}", f"{wall:.3f}"])
        for argv in (["--help"], ["estimate", "--help"]):
            own, _, wall = process_cpu(argv, args.runs)
            figures.setdefault("paraplan " + " ".join(argv), []).extend(
                [f"{own:.3f}", f"{wall:.3f}"]
            )
        cpu, wall = python_cpu(SEARCH_START, args.runs)
        figures.setdefault("search's imports + catalog", []).extend([f"{cpu:.3f}", f"{wall:.3f}"])
    rows = []
    for name, values in figures.items():
        if name.startswith("paraplan"):
            heavy = heavy_modules(*name.split()[1:])
            within = "yes" if float(values[-2]) <= TARGET_S else "no"
            rows.append((name, *values, within, ", ".join(heavy) or "none"))
        else:
            rows.append((name, *values, "-", "-" if "pass" in name else "numpy, ..."))
    header = ("command",)
    for mode in modes:
        header += (f"{mode}: CPU s (least)", f"{mode}: wall s (least)")
    header += (f"{list(modes)[-1]} <= {TARGET_S} s", "heavy modules")
    print(f"{args.runs} fresh processes each; cold: no bytecode cache, warm: with one")
    print_table(header, rows, args.markdown)


if __name__ == "__main__":
    main()
