"""Time of one in-process estimate (issue 31's target: <= 0.5 ms through the Python API), in CPU milliseconds.

Run: python benchmarks/estimate_speed.py [--markdown]
Per case: ``paraplan.api.estimate`` with catalog names (what a user writes) and with the specs, ``step.estimate``
itself warm (its caches filled), cold (op-graph and cost caches cleared before each call) and with the op table;
each the least over several rounds of the mean of a batch (time.process_time: CPU, which other jobs on the machine
do not add to), and whether the API call by names stays within TARGET_MS. The distinct-plans columns: a fixed,
seeded list of DISTINCT_PLANS valid variants of the case (ZeRO, DP overlaps, recompute, micro-batch, vpp), each
``step.estimate`` once with its row's costs kept but its own plan never estimated before (the per-plan caches,
``_violations`` and ``_plan_inputs``, cleared after one warm-up pass over the list; what is kept per row, system or
model shape stays: ``_row``, ``_system_terms``, ``_flops``), mean and least per plan: what a plan costs that no cache
holds.
"""

from __future__ import annotations

import argparse
import random
import time

from _table import print_table

from paraplan import api
from paraplan.catalog import load_model, load_system
from paraplan.specs.errors import InputError
from paraplan.specs.plan import PlanSpec
from paraplan.step.build import COLD_CACHES
from paraplan.step.estimate import estimate

TARGET_MS = 0.5
DISTINCT_PLANS = 50
VARIANTS = dict(
    zero=(0, 1, 2, 3),
    overlap_dp_grad_reduce=(False, True),
    overlap_param_gather=(False, True),
    recompute=("none", "selective", "full"),
    micro_batch=(1, 2),
    vpp=(1, 2, 3, 4, 5),
)
CASES = [
    (
        "gpt3-175b tp8 pp8 vpp3 (Korthikanti Tab. 5)",
        "gpt3-175b",
        "dgx-a100-80gb",
        dict(
            gpus=64,
            tp=8,
            pp=8,
            vpp=3,
            global_batch=64,
            seq_length=2048,
            sequence_parallel=True,
            recompute="selective",
        ),
    ),
    (
        "llama3-70b tp4 pp4 cp2 vpp5 (NeMo)",
        "llama3-70b",
        "dgx-h100-80gb",
        dict(
            gpus=512,
            tp=4,
            pp=4,
            cp=2,
            vpp=5,
            global_batch=1024,
            seq_length=8192,
            sequence_parallel=True,
            zero=1,
        ),
    ),
    (
        "llama3-405b tp8 pp2 cp2 on 16,128 GPUs",
        "llama3-405b",
        "dgx-h100-80gb",
        dict(
            gpus=16128,
            tp=8,
            pp=2,
            cp=2,
            global_batch=2016,
            seq_length=8192,
            sequence_parallel=True,
            zero=1,
        ),
    ),
]


def cpu_ms(call, batch: int = 100, rounds: int = 5) -> float:
    """Least over ``rounds`` of the mean CPU milliseconds of ``batch`` calls."""
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(batch):
            call()
        best = min(best, (time.process_time() - start) / batch)
    return best * 1e3


def cold_ms(model, system, plan, runs: int = 20) -> float:
    """Least CPU milliseconds of one estimate with every cost and op-graph cache cleared before it."""
    from paraplan.graph import transformer
    from paraplan.step import estimate as step_estimate

    best = float("inf")
    for _ in range(runs):
        for cache in (*COLD_CACHES, *step_estimate.ESTIMATE_CACHES):
            cache.cache_clear()
        for builder in (
            transformer.decoder_layer_1d,
            transformer.embedding_block,
            transformer.lm_head_block,
        ):
            builder.cache_clear()
        start = time.process_time()
        estimate(model, system, plan)
        best = min(best, time.process_time() - start)
    return best * 1e3


def distinct_plans(model, system, fields: dict, n: int = DISTINCT_PLANS, seed: int = 0) -> list:
    """``n`` distinct valid variants of ``fields`` (VARIANTS drawn with a seeded generator; a plan whose
    rules fail is drawn again), in drawing order."""
    rng, plans, seen = random.Random(seed), [], set()
    for _ in range(50 * n):
        if len(plans) == n:
            break
        drawn = {name: rng.choice(values) for name, values in VARIANTS.items()}
        if drawn["vpp"] == 1 and rng.random() < 0.5:
            drawn["vpp"] = fields.get("vpp", 1)
        try:
            plan = PlanSpec(**{**fields, **drawn})
            if plan in seen:
                continue
            estimate(model, system, plan)  # the warm-up: its row's costs kept
        # a rule the plan breaks (pydantic's errors are ValueErrors)
        except (InputError, ValueError):
            continue
        seen.add(plan)
        plans.append(plan)
    return plans


def distinct_ms(model, system, plans: list, rounds: int = 3) -> tuple[float, float]:
    """(mean, least) CPU milliseconds of one ``step.estimate`` per plan of ``plans``, each estimated once with
    the per-plan caches (``_violations``, ``_plan_inputs``) cleared before the pass, its row's kept; the least
    mean and least single over ``rounds`` passes."""
    from paraplan.step import estimate as step_estimate

    per_plan = (step_estimate._violations, step_estimate._plan_inputs)
    mean, least = float("inf"), float("inf")
    for _ in range(rounds):
        for cache in per_plan:
            cache.cache_clear()
        times = []
        for plan in plans:
            start = time.process_time()
            estimate(model, system, plan)
            times.append(time.process_time() - start)
        mean, least = min(mean, sum(times) / len(times)), min(least, min(times))
    return mean * 1e3, least * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    rows = []
    for label, model_name, system_name, fields in CASES:
        model, system, plan = load_model(model_name), load_system(system_name), PlanSpec(**fields)
        by_names = cpu_ms(lambda: api.estimate(model_name, system_name, plan))
        variants = distinct_plans(model, system, fields)
        mean, least = distinct_ms(model, system, variants)
        rows.append(
            (
                label,
                f"{by_names:.3f}",
                f"{cpu_ms(lambda: api.estimate(model, system, plan)):.3f}",
                f"{cpu_ms(lambda: estimate(model, system, plan)):.3f}",
                f"{cold_ms(model, system, plan):.2f}",
                f"{cpu_ms(lambda: estimate(model, system, plan, with_ops=True), batch=20):.2f}",
                f"{mean:.3f} / {least:.3f} ({len(variants)})",
                "yes" if by_names <= TARGET_MS else "no",
            )
        )
    header = (
        "case",
        "api, names ms",
        "api, specs ms",
        "step.estimate ms",
        "cold ms",
        "with ops ms",
        "distinct plans mean / least ms (n)",
        f"<= {TARGET_MS} ms",
    )
    print_table(header, rows, args.markdown)


if __name__ == "__main__":
    main()
