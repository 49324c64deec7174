"""Process CPU seconds of a command in fresh interpreters, the measure of issue 31's speed targets.

``process_cpu(args, runs)`` runs ``paraplan ARGS`` (``python -c RUNNER ARGS``) ``runs`` times and returns the least
(self, children) CPU seconds (user + system, from the runner's own ``resource.getrusage`` at exit: RUSAGE_SELF for
the process, RUSAGE_CHILDREN for the worker processes a split block search starts) and the least wall seconds. The
least of several runs: the machine is shared, and other load only ever adds time. The error bands read
validate/residuals.json; while it is stale (any source change before ``python -m paraplan.validate.residuals``)
every process recomputes it (~1 s): ``residuals_current()`` says which.

Where PYTHONDONTWRITEBYTECODE is set (as in this project's sandbox) every fresh process compiles the package's
sources again (~0.05-0.1 s of a search); an installed package runs from its bytecode. ``use_bytecode()`` makes the
processes read and write bytecode in a temporary cache (PYTHONPYCACHEPREFIX) and run once before the measured runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

_ENV: dict | None = None  # the processes' environment (None: this one's)
_WARM: set[tuple] = set()  # (source tree, *args) run once to fill the bytecode cache


def use_bytecode() -> None:
    """Run the measured processes with a bytecode cache (module doc)."""
    global _ENV
    _ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    _ENV["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="paraplan-pycache-")


def run_python(argv: list[str], src: str | None = None) -> subprocess.CompletedProcess:
    """``python ARGV`` in a fresh process, output captured (with the bytecode cache when ``use_bytecode``); with
    ``src``, the package of that source tree (PYTHONPATH=src: another checkout, measured in the same minutes)."""
    env = dict(_ENV if _ENV is not None else os.environ)
    if src is not None:
        env["PYTHONPATH"] = src
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, check=True, env=env
    )


RUNNER = """
import json, os, resource, sys
from paraplan.cli.main import main
code = 0
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
sys.stdout.flush()
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print("CPU:", json.dumps([me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime]), file=sys.stderr)
sys.stderr.flush()
os._exit(0 if code in (None, 0, 1) else 2)
"""


def process_cpu(args: list[str], runs: int, src: str | None = None) -> tuple[float, float, float]:
    """(least self CPU s, least children CPU s, least wall s) of ``paraplan ARGS`` over ``runs`` fresh processes
    (of the source tree ``src``: run_python)."""
    best_self = best_children = best_wall = float("inf")
    if _ENV is not None and (src, *args) not in _WARM:
        run_python(["-c", RUNNER, *args], src)  # fills the bytecode cache
        _WARM.add((src, *args))
    for _ in range(runs):
        start = time.perf_counter()
        proc = run_python(["-c", RUNNER, *args], src)
        wall = time.perf_counter() - start
        line = [x for x in proc.stderr.splitlines() if x.startswith("CPU:")][-1]
        own, children = json.loads(line[len("CPU:") :])
        best_self, best_children = min(best_self, own), min(best_children, children)
        best_wall = min(best_wall, wall)
    return best_self, best_children, best_wall


def residuals_current(src: str | None = None) -> bool:
    """validate/residuals.json carries this package's fingerprint (else each process recomputes it, ~1 s); of the
    source tree ``src`` when given."""
    check = "from paraplan.validate.residuals import stored_residuals as s; print(s() is not None)"
    return run_python(["-c", check], src).stdout.strip() == "True"
