"""Process CPU seconds of a command in fresh interpreters, the measure of issue 31's speed targets.

``process_cpu(args, runs)`` runs ``paraplan ARGS`` (``python -c RUNNER ARGS``) ``runs`` times and returns the least
(self, children) CPU seconds (user + system, from the runner's own ``resource.getrusage`` at exit: RUSAGE_SELF for
the process, RUSAGE_CHILDREN for the worker processes a split block search starts) and the least wall seconds. The
least of several runs: the machine is shared, and other load only ever adds time. The error bands read
validate/residuals.json; while it is stale (any source change before ``python -m paraplan.validate.residuals``)
every process recomputes it (~1 s): ``residuals_current()`` says which.

Where PYTHONDONTWRITEBYTECODE is set (as in this project's sandbox) every fresh process compiles the package's
sources again (~0.1-0.2 s of a search); an installed package runs from its bytecode from its second run on.
``use_bytecode()`` makes the processes read and write bytecode in a temporary cache (PYTHONPYCACHEPREFIX) and run
once before the measured runs ("warm": what a user sees from the second run); ``no_bytecode()`` makes them compile
the package's sources in every process, writing no bytecode ("cold": the first run after an install; the source
tree must hold no ``__pycache__``, as none is written in this sandbox).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

_ENV: dict | None = None  # the processes' environment (None: this one's)
_WARM: set[tuple] = set()  # (cache, source tree, *args) run once to fill the bytecode cache


_MODES: dict[
    str, dict
] = {}  # "warm" / "cold" -> the processes' environment (one cache folder per mode)


def use_bytecode() -> None:
    """Run the measured processes with a bytecode cache, "warm" (module doc)."""
    _use("warm")


def no_bytecode() -> None:
    """Run the measured processes without a bytecode cache, "cold": every source compiled in every process."""
    _use("cold")


def _use(mode: str) -> None:
    global _ENV
    if mode not in _MODES:
        drop = ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
        env = {k: v for k, v in os.environ.items() if k not in drop}
        if (
            mode == "cold"
        ):  # the libraries' and the standard library's installed .pyc read, the package compiled
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        else:
            env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="paraplan-pycache-")
        _MODES[mode] = env
    _ENV = _MODES[mode]


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
    cache = (
        None if _ENV is None or "PYTHONDONTWRITEBYTECODE" in _ENV else _ENV["PYTHONPYCACHEPREFIX"]
    )
    if cache is not None and (cache, src, *args) not in _WARM:
        run_python(["-c", RUNNER, *args], src)  # fills the bytecode cache
        _WARM.add((cache, src, *args))
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
