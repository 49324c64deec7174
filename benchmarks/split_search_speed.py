"""A block-by-block search in one process against split over processes (search.block_processes), on MoE problems.

Run: python benchmarks/split_search_speed.py [--markdown] [--runs N]
Prints: problem, (tp, cp, micro-batch) keys, processes the split uses (auto_workers, when the problem has at least
search.run.PARALLEL_KEYS keys), seconds with ``workers=1`` and with the default (the median of N cold runs each,
alternating, cost caches cleared before each), and whether the two top 10s are the same (keys, objectives, step
times). Wall seconds: the split uses more CPU in total, and less time.
"""

from __future__ import annotations

import argparse
import statistics

from _cold import cold_search
from _table import print_table

from paraplan.catalog import load_model, load_system
from paraplan.search.bounds.block_processes import auto_workers
from paraplan.search.bounds.blocks import blocks
from paraplan.search.run import PARALLEL_KEYS
from paraplan.search.space import SearchProblem

PROBLEMS = [
    ("DeepSeek-V3, 2,048 H800, every axis", "deepseek-v3", "dgx-h800", 2048, 15360),
    ("Kimi K2, 1,024 H800, gbs 4,096", "kimi-k2", "dgx-h800", 1024, 4096),
    ("Qwen3-235B-A22B, 512 H100, gbs 2,048", "qwen3-235b-a22b", "dgx-h100-80gb", 512, 2048),
    ("Mixtral 8x22B, 256 H100, gbs 1,024", "mixtral-8x22b", "dgx-h100-80gb", 256, 1024),
    ("GPT-OSS 120B, 128 B200, gbs 512", "gpt-oss-120b", "dgx-b200", 128, 512),
    ("Mixtral 8x7B, 64 H100, gbs 256", "mixtral-8x7b", "dgx-h100-80gb", 64, 256),
]


def timed(problem: SearchProblem, workers: int | None):
    seconds, result = cold_search(problem, top_k=10, workers=workers)
    return seconds, [(p.key, p.objective, p.estimate.step_time_s) for p in result.plans]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for label, model, system, gpus, batch in PROBLEMS:
        problem = SearchProblem(
            model=load_model(model),
            system=load_system(system),
            gpus=gpus,
            seq_length=4096,
            global_batch=batch,
        )
        keys = len({(b.tp, b.cp, b.micro_batch) for b in blocks(problem)})
        one, split, same = [], [], True
        for _ in range(args.runs):
            seconds, top_one = timed(problem, 1)
            one.append(seconds)
            seconds, top_split = timed(problem, None)
            split.append(seconds)
            same = same and top_one == top_split
        processes = auto_workers() if keys >= PARALLEL_KEYS else 1
        rows.append(
            (
                label,
                f"{keys:,}",
                str(processes),
                f"{statistics.median(one):.2f}",
                f"{statistics.median(split):.2f}",
                "yes" if same else "NO",
            )
        )
    print_table(
        ("problem", "keys", "processes", "one process s", "split s", "same top 10"),
        rows,
        args.markdown,
    )


if __name__ == "__main__":
    main()
