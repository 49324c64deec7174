"""Start-up time of the CLI: wall-clock seconds of ``paraplan --help`` in a fresh process.

Prints the median and the best of N runs of ``python -m paraplan --help`` (and of the installed
``paraplan`` script when it is on PATH), next to a bare ``python -c pass`` for the interpreter's own
start-up, and the modules imported by ``--help`` that the commands load lazily (numpy, matplotlib,
the estimator). Usage: ``python benchmarks/cli_startup.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time

HEAVY = (
    "numpy",
    "matplotlib",
    "paraplan.step.estimate",
    "paraplan.search.run",
    "distributed",
    "pandas",
)


def timed(argv: list[str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        out.append(time.perf_counter() - start)
    return out


def heavy_modules() -> list[str]:
    code = (
        "import sys; sys.argv = ['paraplan', '--help']\n"
        "from paraplan.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        f"print('HEAVY:', *[m for m in {HEAVY!r} if m in sys.modules])"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    line = [x for x in proc.stdout.splitlines() if x.startswith("HEAVY:")][-1]
    return line.split()[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    rows = [
        ("python -c pass", timed([sys.executable, "-c", "pass"], args.runs)),
        (
            "python -m paraplan --help",
            timed([sys.executable, "-m", "paraplan", "--help"], args.runs),
        ),
    ]
    script = shutil.which("paraplan")
    if script:
        rows.append(("paraplan --help", timed([script, "--help"], args.runs)))
    print(f"{'command':<28} {'median s':>9} {'best s':>8}  ({args.runs} runs)")
    for name, times in rows:
        print(f"{name:<28} {statistics.median(times):>9.3f} {min(times):>8.3f}")
    heavy = heavy_modules()
    print("heavy modules imported by --help:", ", ".join(heavy) if heavy else "none")


if __name__ == "__main__":
    main()
