"""search.space.placements skips placement orders by cost.comm.span_signature: the same list as costing every order."""

from __future__ import annotations

import itertools

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.cost.comm import span_signature
from paraplan.search.space import SearchProblem, _Degrees, _placement_orders
from paraplan.specs.parallel import placement_label
from paraplan.stages import plan_spans

SYSTEMS = ("dgx-h800", "gb200-nvl72", "aws-p3.8xlarge", "gh200-96gb-quad")


def _every_order(problem: SearchProblem, tp: int, pp: int, cp: int, dp: int) -> list:
    """The placements by costing every order: the first order of each distinct set of spans."""
    seen, out = set(), []
    for order in _placement_orders():
        spans = plan_spans(_Degrees(tp, pp, cp, dp, order), problem.system)
        key = tuple((s.size, s.per_domain, s.domains) for s in spans.values())
        if key not in seen:
            seen.add(key)
            out.append((placement_label(order), spans))
    return out


@pytest.mark.parametrize("system", SYSTEMS)
def test_placements_equal_costing_every_order(system):
    problem = SearchProblem(model=load_model("deepseek-v3"), system=load_system(system), gpus=576, seq_length=4096,
                            global_batch=576)
    checked = 0
    for tp, pp, cp, dp in itertools.product((1, 2, 3, 4, 8, 9, 16), (1, 2, 4, 8), (1, 2, 4), (1, 2, 8, 9, 18, 36)):
        assert problem.placements(tp, pp, cp, dp) == _every_order(problem, tp, pp, cp, dp)
        checked += 1
    assert checked == 7 * 4 * 3 * 6


def test_span_signature_clips_at_the_domain_and_drops_degree_one():
    # tp 2 · cp 1 · dp 16 · pp 4 on 8-GPU domains: strides 1, -, 2, 32 -> 1, 0, 2, 8
    assert span_signature(_Degrees(2, 4, 1, 16, ("tp", "cp", "dp", "pp")), 8) == (1, 0, 2, 8)
    # two orders that differ only past the domain span alike
    a, b = _Degrees(8, 4, 2, 4, ("tp", "cp", "dp", "pp")), _Degrees(8, 4, 2, 4, ("tp", "cp", "pp", "dp"))
    assert span_signature(a, 8) == span_signature(b, 8) == (1, 8, 8, 8)
    assert list(plan_spans(a, load_system("dgx-h800")).values()) == list(plan_spans(b, load_system("dgx-h800")).values())
