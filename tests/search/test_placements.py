"""search.space.placements finds the orders with distinct spans on the degrees clipped to the NVLink domain
(search.space.distinct_orders): the same list as costing every order on the degrees themselves."""

from __future__ import annotations

import itertools

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.search.space import PLACEMENT_ORDERS, SearchProblem
from paraplan.specs.parallel import ParallelDims, placement_label
from paraplan.step.plan_spans import plan_spans

SYSTEMS = ("dgx-h800", "gb200-nvl72", "aws-p3.8xlarge", "gh200-96gb-quad")


def _every_order(problem: SearchProblem, tp: int, cp: int, dp: int, pp: int) -> list:
    """The placements by costing every order: the first order of each distinct set of spans."""
    seen, out = set(), []
    for order in PLACEMENT_ORDERS:
        spans = plan_spans(ParallelDims(tp, cp, dp, pp, placement_order=order), problem.system)
        key = tuple((s.size, s.per_domain, s.domains) for s in spans.values())
        if key not in seen:
            seen.add(key)
            out.append((placement_label(order), spans))
    return out


@pytest.mark.parametrize("system", SYSTEMS)
def test_placements_equal_costing_every_order(system):
    problem = SearchProblem(
        model=load_model("deepseek-v3"),
        system=load_system(system),
        gpus=576,
        seq_length=4096,
        global_batch=576,
    )
    checked = 0
    for tp, pp, cp, dp in itertools.product(
        (1, 2, 3, 4, 8, 9, 16), (1, 2, 4, 8), (1, 2, 4), (1, 2, 8, 9, 18, 36, 144)
    ):
        assert problem.placements(tp, cp, dp, pp) == _every_order(problem, tp, cp, dp, pp)
        checked += 1
    assert checked == 7 * 4 * 3 * 7
