"""Search speed of several commits side by side, same machine, same run (issue 7's before / after).

Run: python benchmarks/search_speed_compare.py [REF ...] [--repeat N] [--markdown]
(default refs: b77d0d7, the commit before the stage-list foundation, and the work tree).

Each ref is exported with ``git archive`` to a temporary directory; every run is a fresh Python
process (cold caches by construction) that times one ``search(problem, top_k=10)`` with
``time.process_time`` (CPU seconds, less sensitive to other load than wall time); the refs
alternate run by run. The best of ``--repeat`` runs is reported with the space size, the candidates evaluated and the best step time.
The problems are those of benchmarks/search_speed.py (the dense three; the MoE row did not exist
before the foundation).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _table import print_table
from search_speed import PROBLEMS as SPEED_PROBLEMS, RESTRICTIONS

ROOT = Path(__file__).resolve().parent.parent
# the dense problems of benchmarks/search_speed.py (the MoE one did not exist before the foundation)
PROBLEMS = {label: spec for label, *spec in SPEED_PROBLEMS if spec[0] not in RESTRICTIONS}
RUN_ONE = """
import json, sys, time
from paraplan.catalog import load_model, load_system
from paraplan.search.run import search
from paraplan.search.space import SearchProblem
m, s, g, seq, gbs, mg = json.loads(sys.argv[1])
problem = SearchProblem(model=load_model(m), system=load_system(s), gpus=g, seq_length=seq, global_batch=gbs,
                        max_global_batch=mg)
start = time.process_time()
result = search(problem, top_k=10)
seconds = time.process_time() - start
print(json.dumps({"seconds": seconds, "candidates": result.candidates, "evaluated": result.evaluated,
                  "step": result.plans[0].estimate.step_time_s if result.plans else None}))
"""


def source_dir(ref: str, scratch: Path) -> Path:
    """The src/ directory of ``ref`` ("work" = this checkout's work tree)."""
    if ref == "work":
        return ROOT / "src"
    target = scratch / ref
    target.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "src"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target / "src"


def run(src: Path, problem: tuple) -> dict:
    """One cold search in a fresh interpreter on the sources in ``src``."""
    out = subprocess.run(
        [sys.executable, "-c", RUN_ONE, json.dumps(problem)],
        check=True,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "refs", nargs="*", default=["b77d0d7", "work"], help="git refs; 'work' = the work tree"
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs per ref and problem; the best is reported"
    )
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        sources = {ref: source_dir(ref, Path(scratch)) for ref in args.refs}
        table = []
        for label, problem in PROBLEMS.items():
            runs: dict[str, list[dict]] = {ref: [] for ref in args.refs}
            for _ in range(
                args.repeat
            ):  # the refs alternate, so that a burst of other load hits them alike
                for ref in args.refs:
                    runs[ref].append(run(sources[ref], problem))
            cells = []
            for ref in args.refs:
                best = min(runs[ref], key=lambda r: r["seconds"])
                cells.append(
                    f"{best['seconds']:.2f} s, {best['evaluated']:,} evaluated of {best['candidates']:,}"
                    f" (best {best['step']:.2f} s/step)"
                )
            table.append((label, *cells))
    print_table(("problem", *args.refs), table, args.markdown)


if __name__ == "__main__":
    main()
