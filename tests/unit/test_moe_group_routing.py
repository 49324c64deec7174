"""Group-limited routing (DeepSeek-V3's node-limited routing) in the deduplicated dispatch's bytes,
against hand-computed values (cost.moe.group_limited_units_hit, experts_units_hit)."""

import math

import pytest
from pydantic import ValidationError

from paraplan.catalog import load_model
from paraplan.cost.moe import (
    deepep_split_bytes,
    expected_groups_hit,
    experts_units_hit,
    group_limited_units_hit,
)
from paraplan.specs.model import ModelSpec

TOY = dict(layers=4, hidden=64, heads=4, ffn_hidden=256, vocab=100, mlp="swiglu", norm="rmsnorm")


def test_units_holding_whole_groups_by_hand():
    # E 256, k 8, G 8, M 4. One group a unit (8 units): missed when the 4 groups avoid it,
    # C(7,4)/C(8,4) = 35/70, so 8 * 1/2 = 4 units; two groups a unit (4 units): C(6,4)/C(8,4) = 15/70.
    assert group_limited_units_hit(256, 8, 8, 8, 4) == pytest.approx(4.0)
    assert group_limited_units_hit(256, 8, 4, 8, 4) == pytest.approx(4 * (1 - 15 / 70))
    assert group_limited_units_hit(256, 8, 1, 8, 4) == 1.0


def test_units_inside_groups_by_hand():
    # 32 units of u = 8 experts, 4 to a group of s = 32: the unit's group is chosen with 4/8, then its
    # k/M = 2 experts miss the unit with C(24,2)/C(32,2) = 276/496.
    assert group_limited_units_hit(256, 8, 32, 8, 4) == pytest.approx(32 * 0.5 * (1 - 276 / 496))
    # 64 units of 4: C(28,2)/C(32,2) = 378/496
    assert group_limited_units_hit(256, 8, 64, 8, 4) == pytest.approx(64 * 0.5 * (1 - 378 / 496))


def test_fewer_units_than_uniform_routing_and_fallback():
    for units in (4, 8, 16, 32, 64):
        assert group_limited_units_hit(256, 8, units, 8, 4) < expected_groups_hit(256, 8, units)
    # 6 units neither hold whole groups nor divide one: uniform routing
    assert group_limited_units_hit(256, 8, 6, 8, 4) == expected_groups_hit(256, 8, 6)


def test_the_model_fields_choose_the_rule():
    ds = load_model("deepseek-v3")
    assert (ds.router_groups, ds.router_group_topk) == (8, 4)
    assert experts_units_hit(ds, 8) == pytest.approx(4.0)
    free = ds.model_copy(update={"router_groups": None, "router_group_topk": None})
    assert experts_units_hit(free, 8) == expected_groups_hit(256, 8, 8)
    # DeepEP over 4 nodes of 8 GPUs (EP 32): NIC bytes = size * d * 3/4, d = 4 * (1 - 15/70)
    size = 2 * 7168 * 4096.0
    _, nic = deepep_split_bytes(ds, size, 32, 8)
    assert nic == pytest.approx(size * 4 * (1 - 15 / 70) * 3 / 4)
    nvlink, _ = deepep_split_bytes(ds, size, 32, 8)
    g = 32 * 0.5 * (1 - math.comb(24, 2) / math.comb(32, 2))
    assert nvlink == pytest.approx(size * g * 7 / 8)


@pytest.mark.parametrize(
    "extra, words",
    [
        (dict(router_groups=8), "go together"),
        (dict(router_groups=3, router_group_topk=1), "divide experts"),
        (dict(router_groups=4, router_group_topk=4), "below router_groups"),
        (dict(router_groups=4, router_group_topk=3), "multiple of router_group_topk"),
        # 2 experts from each chosen group, of 1 a group: no such routing (C(1, 2) = 0 in the unit count)
        (dict(router_groups=8, router_group_topk=1), "a group holds"),
    ],
)
def test_group_fields_are_checked(extra, words):
    with pytest.raises(ValidationError, match=words):
        ModelSpec(**(TOY | dict(experts=8, top_k=2, moe_ffn_hidden=32) | extra))
    with pytest.raises(ValidationError, match="needs experts"):
        ModelSpec(**(TOY | dict(router_groups=2, router_group_topk=1)))
