"""Per-call time of the block search's layer costing on the unrestricted DeepSeek-V3 problem (2,048 H800s).

Run: python benchmarks/costing_speed.py [--markdown] [--keys N]
Prints ms per call of search.blocks.layer_floors over the first N distinct (tp, cp, micro-batch) keys of the space, then
of work_floors (every expert option) over their first span pair: caches cleared once (stages.COLD_CACHES and the
graph builders), then warm as in a search, which visits the keys in this order.
"""

from __future__ import annotations

import argparse
import sys
import time

from _table import print_table

from paraplan.catalog import load_model, load_system
from paraplan.search.bounds.blocks import block_span_pairs, blocks, layer_floors, work_floors
from paraplan.search.space import SearchProblem

COSTING_MODULES = (
    "paraplan.cost",
    "paraplan.graph",
    "paraplan.step.build",
    "paraplan.search.arrays",
    "paraplan.schedule",
)


def clear_costing_caches() -> None:
    """Every lru cache of the costing modules (not the catalog loaders): the first key starts cold."""
    for name, module in list(sys.modules.items()):
        if name.startswith(COSTING_MODULES):
            for value in list(vars(module).values()):
                if hasattr(value, "cache_clear") and getattr(value, "__module__", "") == name:
                    value.cache_clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument(
        "--keys", type=int, default=400, help="distinct (tp, cp, micro-batch) keys to cost"
    )
    args = parser.parse_args()
    problem = SearchProblem(
        model=load_model("deepseek-v3"),
        system=load_system("dgx-h800"),
        gpus=2048,
        seq_length=4096,
        global_batch=15360,
    )
    keys: dict[tuple, tuple] = {}
    for b in blocks(problem):
        keys.setdefault((b.tp, b.cp, b.micro_batch), block_span_pairs(problem, b)[0])
        if len(keys) >= args.keys:
            break
    clear_costing_caches()
    start = time.perf_counter()
    for key in keys:
        layer_floors(problem, *key)
    layer_s = time.perf_counter() - start
    start = time.perf_counter()
    for key, pair in keys.items():
        work_floors(problem, *key, (pair,), True)
    work_s = time.perf_counter() - start
    rows = [
        ("layer_floors", f"{len(keys):,}", f"{layer_s * 1e3 / len(keys):.2f}"),
        ("work_floors (expert kinds)", f"{len(keys):,}", f"{work_s * 1e3 / len(keys):.2f}"),
    ]
    print_table(("function", "calls", "ms per call"), rows, args.markdown)


if __name__ == "__main__":
    main()
