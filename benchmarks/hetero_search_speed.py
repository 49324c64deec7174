"""Time the heterogeneous searches (issue 10): AMP-style search on mixed clusters and the Aceso-style
per-stage search on one GPU type. Prints Markdown tables; run: python benchmarks/hetero_search_speed.py
[--budget-only]. The second table (issue 31): both searches on 1,024 GPUs with a time budget of
BUDGET_S seconds (``--time-budget 5``), where a plan is found and where none fits, wall and CPU
seconds of the search and whether its wall time stayed within the budget (plus BUDGET_SLACK_S, the
one candidate or alleviation step in flight at the deadline), and the space the search counted in closed
form (search.staged.non_uniform.non_uniform_space_size, search.staged.hetero.cluster_space_size: the
count it returned and the CPU milliseconds it took, read off the search's own call)."""

from __future__ import annotations

import argparse
import contextlib
import time

from paraplan.catalog import load_model
from paraplan.catalog.clusters import cluster_from_dict
from paraplan.search.staged import hetero, non_uniform
from paraplan.search.staged.hetero import HeteroProblem, search_cluster
from paraplan.search.staged.non_uniform import search_non_uniform

CASES = [
    (
        "amp-gpt2-medium-like (gpt3-350m)",
        "gpt3-350m",
        [("v100", "aws-p3.8xlarge", 3), ("t4", "aws-g4dn.12xlarge", 1)],
        32,
        1024,
    ),
    (
        "gpt3-1.3b, 64 GPUs: 4x p3.16xlarge + 8x g4dn.12xlarge",
        "gpt3-1.3b",
        [("v100", "aws-p3.16xlarge", 4), ("t4", "aws-g4dn.12xlarge", 8)],
        512,
        2048,
    ),
    (
        "gpt3-2.7b, 64 GPUs: 4x DGX-1 + 4x DGX A100 40GB",
        "gpt3-2.7b",
        [("v100", "dgx-1-v100", 4), ("a100", "dgx-a100-40gb", 4)],
        512,
        2048,
    ),
]


BUDGET_S = 5.0
BUDGET_SLACK_S = 0.5
# (search, model, pools (name, system, nodes), global batch, sequence length): 1,024 GPUs each
BUDGET_CASES = [
    ("--non-uniform", "gpt3-175b", [("a100", "dgx-a100-80gb", 128)], 1024, 2048),
    ("--non-uniform", "megatron-1t", [("t4", "aws-g4dn.12xlarge", 256)], 1024, 2048),
    (
        "--cluster",
        "gpt3-175b",
        [("a100", "dgx-a100-80gb", 64), ("h100", "dgx-h100-80gb", 64)],
        1024,
        2048,
    ),
    (
        "--cluster",
        "megatron-1t",
        [("t4", "aws-g4dn.12xlarge", 128), ("v100", "aws-p3.8xlarge", 128)],
        1024,
        2048,
    ),
    # sixteen pools (12,870 distinct orders, listed lazily: search.staged.pool_orders)
    (
        "--cluster",
        "gpt3-175b",
        [(f"p{i}", ("dgx-a100-80gb", "dgx-h100-80gb")[i % 2], 8) for i in range(16)],
        1024,
        2048,
    ),
]


@contextlib.contextmanager
def counted(module, name: str):
    """Record (count, CPU seconds) of each call the search makes to ``module.name`` (its space count)."""
    original, calls = getattr(module, name), []

    def spy(*args, **kwargs):
        c0 = time.process_time()
        size = original(*args, **kwargs)
        calls.append((size, time.process_time() - c0))
        return size

    setattr(module, name, spy)
    try:
        yield calls
    finally:
        setattr(module, name, original)


def budget_table() -> None:
    """Issue 31: the searches on 1,024 GPUs stop within ``--time-budget``, found or not, the space counted
    in closed form."""
    print(
        f"| search | model / cluster | GPUs | wall s | CPU s | within {BUDGET_S:g} s | space (closed form) "
        "| count ms | best step (s) | stopped |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for kind, model, pools, batch, seq in BUDGET_CASES:
        cluster = cluster_from_dict(
            {"pools": [{"name": n, "system": s, "nodes": k} for n, s, k in pools]}
        )
        problem = HeteroProblem(load_model(model), cluster, batch, seq)  # dtype chosen per pool
        search = search_non_uniform if kind == "--non-uniform" else search_cluster
        count = (
            counted(non_uniform, "non_uniform_space_size")
            if kind == "--non-uniform"
            else counted(hetero, "cluster_space_size")
        )
        with count as calls:
            t0, c0 = time.perf_counter(), time.process_time()
            result = search(problem, top_k=5, time_budget_s=BUDGET_S)
            elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        space = f"{calls[0][0]:,}" if calls else "not counted"
        count_ms = f"{sum(t for _, t in calls) * 1e3:.1f}" if calls else "-"
        best = f"{result.plans[0].step_time_s:.3f}" if result.plans else "none found"
        within = "yes" if elapsed <= BUDGET_S + BUDGET_SLACK_S else "no"
        where = " + ".join(f"{k}x {s}" for _, s, k in pools)
        print(
            f"| {kind} | {model}, {where} | {cluster.gpus} | {elapsed:.2f} | {cpu:.2f} | {within} | "
            f"{space} | {count_ms} | {best} | {result.stopped or '-'} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--budget-only", action="store_true", help="only the 1,024-GPU budget table"
    )
    if not parser.parse_args().budget_only:
        speed_table()
        print()
    budget_table()


def speed_table() -> None:
    print("| search | model / cluster | GPUs | candidates | wall s | CPU s | best step (s) |")
    print("|---|---|---|---|---|---|---|")
    for label, model, pools, batch, seq in CASES:
        cluster = cluster_from_dict(
            {"pools": [{"name": n, "system": s, "nodes": k} for n, s, k in pools]}
        )
        problem = HeteroProblem(load_model(model), cluster, batch, seq, "fp16")
        t0, c0 = time.perf_counter(), time.process_time()
        result = search_cluster(problem, top_k=1)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        best = f"{result.plans[0].step_time_s:.3f}" if result.plans else "none fits"
        print(
            f"| --cluster (AMP-style) | {label} | {cluster.gpus} | {result.evaluated} | {elapsed:.2f} | {cpu:.2f} | {best} |"
        )
    uniform = cluster_from_dict(
        {"pools": [{"name": "a100", "system": "dgx-a100-40gb", "nodes": 8}]}
    )
    problem = HeteroProblem(load_model("gpt3-2.7b"), uniform, 512, 2048, "bf16")
    t0, c0 = time.perf_counter(), time.process_time()
    result = search_non_uniform(problem, time_budget_s=10.0)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(
        f"| --non-uniform ({result.mode}) | gpt3-2.7b on 64 x A100 40GB | 64 | {result.evaluated} | {elapsed:.2f} | {cpu:.2f} | "
        f"{result.plans[0].step_time_s:.3f} |"
    )


if __name__ == "__main__":
    main()
