"""The DeepSeek-V3 search (2,048 H800, every axis, top 10) in a fresh process, for instruction counts: this VM's seconds
move by ±40 % with its neighbours' load, a callgrind count does not (to ~0.05 % between runs with one hash seed).

Run (one process; the count includes ~2.0 G of imports and catalog loading):
    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null python benchmarks/search_instructions.py
Split over processes (one count per process, in each file's "summary:" line; each includes the ~2.5 G before the fork,
and the longer one sets the wall time):
    PYTHONHASHSEED=0 valgrind --tool=callgrind --trace-children=yes --callgrind-out-file=/tmp/cg.%p \\
        python benchmarks/search_instructions.py --workers 2
Prints a table: workers, candidates evaluated, the best plan's objective and step time (to check that two trees
searched alike). Figures: docs/performance.md.
"""

from __future__ import annotations

import argparse

from _table import print_table

from paraplan.catalog import load_model, load_system
from paraplan.search.run import search
from paraplan.search.space import SearchProblem


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="processes the block search uses (default 1)"
    )
    parser.add_argument(
        "--fp8", action="store_true", help="the fp8 space (the README's example's dtype)"
    )
    parser.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = parser.parse_args()
    problem = SearchProblem(
        model=load_model("deepseek-v3"),
        system=load_system("dgx-h800"),
        gpus=2048,
        seq_length=4096,
        global_batch=15360,
        dtype="fp8" if args.fp8 else "bf16",
    )
    result = search(problem, top_k=10, workers=args.workers)
    best = result.plans[0]
    print_table(
        ("workers", "evaluated", "best objective", "best step s"),
        [
            (
                str(args.workers),
                f"{result.evaluated:,}",
                f"{best.objective:.6e}",
                f"{best.estimate.step_time_s:.4f}",
            )
        ],
        args.markdown,
    )


if __name__ == "__main__":
    main()
