"""One row table against block by block (search.run._by_blocks), on MoE and dense problems.

Run: python benchmarks/block_search_speed.py [--markdown] [--all]
Prints: problem, rows, blocks, seconds with one row table (``search(..., blocks=False)``), seconds block by
block (``blocks=True``), and whether the two top 10s are the same (keys and objectives). One cold run each
(cost caches cleared before each), wall seconds. Without ``--all`` the three problems whose one table takes
more than half a minute (Mixtral 8x22B, Qwen3-235B, GPT-OSS 120B: ~3 min together) are left out.
"""

from __future__ import annotations

import argparse

from _cold import cold_search
from _table import print_table

from paraplan.catalog import load_model, load_system
from paraplan.search.bounds.blocks import blocks
from paraplan.search.space import SearchProblem
from search_speed import RESTRICTIONS

# (label, model, system, GPUs, sequence, SearchProblem batch fields, slow with one table)
PROBLEMS = [
    (
        "Mixtral 8x7B, 8 H100, gbs 64",
        "mixtral-8x7b",
        "dgx-h100-80gb",
        8,
        4096,
        {"global_batch": 64},
        False,
    ),
    (
        "Mixtral 8x7B, 16 H100, gbs 64",
        "mixtral-8x7b",
        "dgx-h100-80gb",
        16,
        4096,
        {"global_batch": 64},
        False,
    ),
    (
        "Mixtral 8x7B, 64 H100, gbs 256",
        "mixtral-8x7b",
        "dgx-h100-80gb",
        64,
        4096,
        {"global_batch": 256},
        False,
    ),
    (
        "Mixtral 8x22B, 256 H100, gbs 1,024",
        "mixtral-8x22b",
        "dgx-h100-80gb",
        256,
        4096,
        {"global_batch": 1024},
        True,
    ),
    (
        "Qwen3-235B-A22B, 512 H100, gbs 2,048",
        "qwen3-235b-a22b",
        "dgx-h100-80gb",
        512,
        4096,
        {"global_batch": 2048},
        True,
    ),
    (
        "GPT-OSS 120B, 128 B200, gbs 512",
        "gpt-oss-120b",
        "dgx-b200",
        128,
        4096,
        {"global_batch": 512},
        True,
    ),
    (
        "DeepSeek-V3, 2,048 H800, restricted",
        "deepseek-v3",
        "dgx-h800",
        2048,
        4096,
        {"global_batch": 15360, **RESTRICTIONS["deepseek-v3"]},
        False,
    ),
    (
        "Llama 3 70B (dense), 64 H100, seq 8,192, gbs 128",
        "llama3-70b",
        "dgx-h100-80gb",
        64,
        8192,
        {"global_batch": 128},
        False,
    ),
    (
        "GPT-3 175B (dense), 1,024 A100, max gbs 1,024",
        "gpt3-175b",
        "dgx-a100-80gb",
        1024,
        2048,
        {"max_global_batch": 1024},
        False,
    ),
]


def timed(problem: SearchProblem, by_blocks: bool):
    seconds, result = cold_search(problem, top_k=10, blocks=by_blocks)
    return seconds, [(r.key, r.objective) for r in result.plans]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument(
        "--all", action="store_true", help="also the problems whose one table takes minutes"
    )
    args = parser.parse_args()
    rows = []
    for label, model, system, gpus, seq, batch, slow in PROBLEMS:
        if slow and not args.all:
            continue
        problem = SearchProblem(
            model=load_model(model), system=load_system(system), gpus=gpus, seq_length=seq, **batch
        )
        parts = blocks(problem)
        table_s, table_plans = timed(problem, False)
        blocks_s, block_plans = timed(problem, True)
        rows.append(
            (
                label,
                f"{sum(b.rows for b in parts):,}",
                f"{len(parts):,}",
                f"{table_s:.2f}",
                f"{blocks_s:.2f}",
                "yes" if table_plans == block_plans else "NO",
            )
        )
    print_table(
        ("problem", "rows", "blocks", "one table s", "block by block s", "same top 10"),
        rows,
        args.markdown,
    )


if __name__ == "__main__":
    main()
