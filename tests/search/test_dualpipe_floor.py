"""DualPipe needs an even micro-batch count of at least 2·pp (deepseek-ai/DualPipe's DualPipe.step
asserts ``num_chunks >= num_ranks * 2``, dualpipe/dualpipe.py:333 at 3da1bbe): the rule lives in
specs.rules.dualpipe_rule, the estimate refuses such a plan and the search never proposes one."""

from __future__ import annotations

import math
from collections import Counter

from tests.search.test_moe_search import mixtral_problem

from paraplan.search.run import search

DUALPIPE_SHORT = [
    "estimate",
    "-m",
    "mixtral-8x7b",
    "-s",
    "dgx-h100-80gb",
    "--gpus",
    "16",
    "--pp",
    "4",
    "--ep",
    "4",
    "--micro-batch",
    "1",
    "--seq-length",
    "4096",
    "--recompute",
    "full",
    "--schedule",
    "dualpipe",
]


def test_estimate_refuses_dualpipe_with_fewer_than_two_pp_micro_batches(cli):
    """pp 4, 16 samples over dp 4: 4 micro-batches, even but below 2·pp = 8."""
    code, out, err = cli(*DUALPIPE_SHORT, "--global-batch", "16")
    assert code == 2 and out == ""
    assert err.strip() == (
        "error: plan.schedule: 'dualpipe' is not allowed; needs an even pp and an even micro-batch "
        "count of at least 2·pp = 8 (got pp=4, micro-batches=4)"
    )
    code, _, _ = cli(*DUALPIPE_SHORT, "--global-batch", "32")  # 8 micro-batches: runs and fits
    assert code == 0


def test_search_never_proposes_dualpipe_below_two_pp_micro_batches():
    """Mixtral on 16 H100s, pp 2 and 4, 16 samples: rows with 2 to 16 micro-batches, so some have an
    even count below 2·pp (pp 2 with 2, pp 4 with 4), which the search used to offer DualPipe."""
    problem = mixtral_problem(
        schedules=("1f1b", "dualpipe"), pp=(2, 4), global_batch=16, micro_batch=(1, 2)
    )
    plans = [item["plan"] for item in search(problem, top_k=10, collect_all=True).all_feasible]
    counts = Counter((p.pp, p.microbatches, p.pipeline_schedule) for p in plans)
    assert counts[(2, 2, "1f1b")] and counts[(4, 4, "1f1b")]  # the short rows are searched
    dual = [p for p in plans if p.pipeline_schedule == "dualpipe"]
    assert {(p.pp, p.microbatches) for p in dual} >= {(2, 4), (4, 8)}
    assert all(p.microbatches >= 2 * p.pp and p.microbatches % 2 == 0 for p in dual)


def test_paired_least_by_hand():
    """Options read in ascending compute: once one with EP dispatch is found at t, the others matter only below
    t/s, and the first option at or above it floors them all (search.bounds.expert_floors._paired_least)."""
    from paraplan.search.bounds.expert_floors import _paired_least

    totals = (3.0, 1.0, 2.0, 1.1)
    share = 0.5
    asked = []

    def dispatched(j):
        asked.append(j)
        return j in (1, 2)

    # 1.0 dispatches (ep 1.0); 1.1 does not (free 1.1): both found, 2.0 never asked
    assert _paired_least(totals, dispatched, share) == (1.0, 1.1)
    assert asked == [1, 3]
    # every option dispatches: at 2.0 >= 1.0/0.5 the others are floored at 2.0
    asked.clear()
    assert _paired_least(totals, lambda j: asked.append(j) or True, share) == (1.0, 2.0)
    assert asked == [1, 3]
    # none dispatches: the least of them, no EP option
    assert _paired_least(totals, lambda j: False, share) == (math.inf, 1.0)
