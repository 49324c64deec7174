"""Stages that do not tile the nodes (issue 31): one placement rule for both paths (cost.comm.placed_span,
span_of_domains; step.placement), checked against hand-placed ranks on 8-GPU nodes."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_system
from paraplan.cost.comm import GroupSpan, group_span, placed_span, span_of_domains
from paraplan.cost.group_spans import stage_group_spans, stage_spans, strided_groups_span
from paraplan.specs.parallel import ParallelDims
from paraplan.step.plan_spans import plan_spans
from paraplan.step.p2p import PipelineLinks
from paraplan.step.placement import (
    StageDims,
    boundary_crosses,
    placed_p2p_s,
    plan_stages_tile,
    position_spans,
)
from tests.unit.test_one_path import assert_same, both_paths

D = 8


def test_span_of_domains_by_hand():
    assert span_of_domains((3, 5)) == GroupSpan(8, 5, 2)
    assert span_of_domains((4,)) == GroupSpan(4, 4, 1)


@pytest.mark.parametrize(
    "first, members, stride, span",
    [
        (0, 3, 1, (3, 3, 1)),  # stage 0 of S = 3: ranks 0-2 on node 0
        (6, 3, 1, (3, 2, 2)),  # stage 2: ranks 6, 7 | 8
        (6, 3, 2, (3, 2, 2)),  # tp 2 dp 3, stage 1: ranks 6 | 8, 10
        (12, 6, 1, (6, 4, 2)),  # S = 6, stage 2: ranks 12-15 | 16, 17
        (0, 12, 1, (12, 8, 2)),  # one stage of 12: 8 | 4
    ],
)
def test_placed_span_by_hand(first, members, stride, span):
    assert placed_span(first, members, stride, D) == GroupSpan(*span)


def test_placed_span_counts_each_domain_as_rank_by_rank():
    """placed_span counts a domain's members in closed form (issue 31: a 16,384-GPU dense group in one pass per
    domain, not per rank): the same span as the ranks placed one by one, over strides below, at and above D."""
    for domain in (1, 3, 4, 8, 72):
        # every offset on small domains; on the 72-GPU one, offsets at, next to and past its edges
        firsts = range(3 * domain + 2) if domain < 72 else (0, 1, 35, 70, 71, 72, 73, 143, 144, 145)
        for first in firsts:
            for members in range(1, 30):
                for stride in range(1, 2 * domain + 3):
                    counts: dict[int, int] = {}
                    for k in range(members):
                        node = (first + k * stride) // domain
                        counts[node] = counts.get(node, 0) + 1
                    expected = span_of_domains(counts.values())
                    assert placed_span(first, members, stride, domain) == expected


def test_placed_span_of_a_large_group_by_hand():
    # ranks 5..16,388 on 8-GPU domains: 3 on domain 0, 8 on each of 2,047, 5 on the last (2,049 domains)
    assert placed_span(5, 16384, 1, 8) == GroupSpan(16384, 8, 2049)
    # stride 8 on 8-GPU domains: one member per domain
    assert placed_span(3, 100, 8, 8) == GroupSpan(100, 1, 100)
    # stride 3: ranks 0, 3, 6 | 9, 12, 15 | 18, 21 | 24 ...
    assert placed_span(0, 9, 3, 8) == GroupSpan(9, 3, 4)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("dp", [1, 2, 4, 8, 16])
def test_placed_span_is_group_span_where_stages_tile(tp, dp):
    """Stage 0's dp group, and stage s's, where the stages tile the nodes: rank 0's span (group_span)."""
    system = load_system("dgx-h100-80gb")
    dims = ParallelDims(tp=tp, dp=dp, pp=4)
    expected = group_span(dims, system, "dp")
    for s in range(4):
        assert placed_span(s * tp * dp, dp, tp, D) == expected


@pytest.mark.parametrize(
    "stage, tiles", [(1, True), (3, False), (4, True), (6, False), (12, False), (16, True)]
)
def test_stages_tile(stage, tiles):
    assert plan_stages_tile(ParallelDims(dp=stage, pp=2), D) is tiles
    # another placement: priced on rank 0's spans (the per-stage path has no placement)
    other = ("pp", "tp", "cp", "dp")
    assert plan_stages_tile(ParallelDims(dp=stage, pp=2, placement_order=other), D)


def test_boundaries_of_three_gpu_stages_by_hand():
    """S = 3, pp 6 on 8-GPU nodes: stages 0-2 | 3-5 | 6-8 | 9-11 | 12-14 | 15-17; replica k of stage a
    sends from rank 3a + k to 3(a + 1) + k. 0|1: 0→3, 1→4, 2→5 one node; 1|2: 5→8 crosses; 2|3: 6→9
    crosses; 3|4: 9-11 → 12-14 node 1; 4|5: 14→17 crosses; the wrap 5|0: 15→0 crosses."""
    crossing = [bool(boundary_crosses(a, (a + 1) % 6, 3, 1, D)) for a in range(6)]
    assert crossing == [False, True, True, False, True, True]


def test_placed_p2p_by_hand():
    """Inner link 1 s, outer 10 s per exchange (boundaries as above). 1F1B: stage 0 one exchange with
    stage 1 (1), stage 2 two across (20), stage 3 one across and one inside (11), stage 5 its previous
    across (10); interleaved vpp 2: stage 0 two with stage 1 and one wrapping across (2 + 10)."""
    links = PipelineLinks(1.0, 10.0, 3, 3, None, 0.0)
    dims = StageDims(tp=1, cp=1, dp=3, pp=6)
    one_f_one_b = [float(placed_p2p_s(links, s, dims, 1, D)) for s in range(6)]
    assert one_f_one_b == [1.0, 11.0, 20.0, 11.0, 11.0, 10.0]
    assert float(placed_p2p_s(links, 0, dims, 2, D)) == 2 * 1.0 + 1 * 10.0


def test_straddling_stage_pays_the_network_on_both_paths():
    """gpt3-1.3b on 18 H100s, tp 1 pp 6 dp 3, vpp 3, ZeRO-3: stage 2 (ranks 6-8) straddles nodes 0 and 1,
    so its dp group gathers and reduces over the network and the step waits for it. Both paths give
    0.2827 s (the uniform path gave 0.1699 s, its dp group priced on rank 0's node alone: dp_comm 0.032 s
    against 0.137 s)."""
    uniform, per_stage = both_paths(
        "gpt3-1.3b",
        gpus=18,
        tp=1,
        pp=6,
        vpp=3,
        zero=3,
        global_batch=36,
        micro_batch=1,
        seq_length=2048,
        schedule="interleaved",
    )
    assert_same(uniform, per_stage)
    assert uniform.step_time_s == pytest.approx(0.28265288332547583, rel=1e-9)
    assert uniform.breakdown.dp_comm_s == pytest.approx(0.13745110907812763, rel=1e-9)


@pytest.mark.parametrize("domain", [8, 72])
@pytest.mark.parametrize("tp", [1, 2, 3, 4, 6, 8, 16])
def test_boundary_rule_is_the_pairwise_one(domain, tp):
    """The closed form against replica pairs one by one (the per-stage path's rule, step.stage_links.p2p_links:
    a pair's GPUs on one node or not), over stages of tp·dp GPUs, neighbours and wrapping pairs."""
    for dp in range(1, 10):
        stage = tp * dp
        for a in range(6):
            for b in range(a + 1, 7):
                pairwise = any(
                    (a * stage + k * tp) // domain != (b * stage + k * tp) // domain
                    for k in range(dp)
                )
                assert bool(boundary_crosses(a, b, stage, tp, domain)) is pairwise
                assert bool(boundary_crosses(b, a, stage, tp, domain)) is pairwise


@pytest.mark.parametrize(
    "first, ranks, members, stride, span",
    [
        (0, 8, 4, 1, (4, 4, 1)),  # tp 4 divides the node: rank 0's
        (0, 24, 3, 1, (3, 2, 2)),  # tp 3: ranks 6, 7 | 8 and 15 | 16, 17
        (0, 3, 3, 1, (3, 3, 1)),  # stage 0 of S = 3 alone
        (6, 3, 3, 1, (3, 2, 2)),  # stage 2 of S = 3: ranks 6, 7 | 8
        (0, 24, 6, 1, (6, 4, 2)),  # tp 6: 6, 7 | 8-11 and 12-15 | 16, 17
        (0, 12, 2, 3, (2, 1, 2)),  # cp 2 with tp 3: ranks 6 | 9
        (0, 24, 12, 1, (12, 8, 2)),  # tp 12: 0-7 | 8-11, 12-15 | 16-23
    ],
)
def test_strided_groups_span_by_hand(first, ranks, members, stride, span):
    assert strided_groups_span(first, ranks, members, stride, D) == GroupSpan(*span)


def test_plan_spans_price_the_slowest_tp_group():
    """tp 3 · dp 8 on 8-GPU nodes: rank 0's tp group sits on node 0, ranks 6-8 straddle; the dense gradient
    group of tp-rank-0 ranks 0, 3, 6 | 9, 12, 15 | 18, 21 spans three nodes (group_span said two)."""
    system = load_system("dgx-h100-80gb")
    dims = ParallelDims(tp=3, dp=8, pp=2)
    assert group_span(dims, system, "tp") == GroupSpan(3, 3, 1)
    spans = plan_spans(dims, system)
    assert spans["tp"] == GroupSpan(3, 2, 2)
    assert spans["dense"] == GroupSpan(8, 3, 3)
    assert stage_group_spans(3, 1, 8, 2, D) == (GroupSpan(3, 2, 2), GroupSpan(1, 1, 1))


def test_each_stage_has_its_own_tp_and_cp_spans():
    """tp 3, cp 2, dp 1 on 8-GPU nodes (S = 6), by hand: stage 0 (ranks 0-5) holds tp groups 0-2, 3-5 and cp
    groups {0, 3}, {1, 4}, {2, 5} on node 0; stage 1 (ranks 6-11) tp group 6-8 over nodes 0 | 1 (2 + 1) and
    cp group {6, 9} over two; stage 2 (ranks 12-17) tp group 15 | 16-17 and cp group {13, 16} over two.
    tp 3, pp 3, dp 1: the plan's spans (the slowest) are stage 2's (ranks 6-8), so position_spans is None
    there and stages 0 and 1 get their own (one node)."""
    one, two = GroupSpan(3, 3, 1), GroupSpan(3, 2, 2)
    assert stage_spans(3, 2, 1, 0, 8) == (one, GroupSpan(2, 2, 1))
    assert stage_spans(3, 2, 1, 1, 8) == (two, GroupSpan(2, 1, 2))
    assert stage_spans(3, 2, 1, 2, 8) == (two, GroupSpan(2, 1, 2))
    assert stage_group_spans(3, 2, 1, 3, 8) == (two, GroupSpan(2, 1, 2))
    system = load_system("dgx-h100-80gb")
    dims = ParallelDims(3, 1, 1, 3)
    single = GroupSpan(1, 1, 1)
    assert [position_spans(dims, system, s) for s in range(3)] == [
        (one, single),
        (one, single),
        None,
    ]
