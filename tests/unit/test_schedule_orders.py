"""Each pipeline schedule's instruction order (step.schedules, ``order``): every pass once, the
activations held at most as the schedule's ``in_flight`` says, and, placed in time with equal
stages, the composition's bubble (the plan explorer's timeline draws these orders)."""

from __future__ import annotations

from collections import Counter

import pytest

from paraplan.step.schedule_orders import interleaved_warmup, one_f_one_b_warmup
from paraplan.step.schedules import (
    SCHEDULES,
    schedule_order,
    zb_h1_bubble_share,
    zb_h1_w_credit,
)
from paraplan.web.timeline import place

CASES = [(2, 1, 1), (2, 1, 4), (4, 1, 3), (4, 1, 8), (8, 1, 16), (4, 2, 8), (4, 3, 12)]


@pytest.mark.parametrize("name", sorted(SCHEDULES))
@pytest.mark.parametrize("pp, vpp, m", CASES)
def test_every_pass_runs_once_on_every_stage(name, pp, vpp, m):
    vpp = vpp if name == "interleaved" else 1
    kinds = ("F", "B", "W") if SCHEDULES[name].split_backward else ("F", "B")
    # DualPipe: m/2 micro-batches per direction (chunk = direction), m >= 2p, p and m even
    if SCHEDULES[name].directions == 2 and (m % 2 or m < 2 * pp):
        with pytest.raises(ValueError, match="m >= 2p"):
            schedule_order(name, pp, vpp, m)
        m = 2 * pp
    per, chunks = (m // 2, 2) if SCHEDULES[name].directions == 2 else (m, vpp)
    for order in schedule_order(name, pp, vpp, m):
        count = Counter(order)
        assert set(count.values()) == {1}
        assert set(count) == {(k, i, c) for k in kinds for i in range(per) for c in range(chunks)}


@pytest.mark.parametrize("pp, m", [(2, 4), (4, 8), (4, 10), (8, 16), (8, 40)])
def test_dualpipe_holds_at_most_its_in_flight_micro_batches(pp, m):
    """DualPipe: a micro-batch's activations live from its F to its W; at most p + 1 on a rank
    (DeepSeek-V3 Table 2, SCHEDULES["dualpipe"].in_flight.count)."""
    entry = SCHEDULES["dualpipe"]
    for s, order in enumerate(schedule_order("dualpipe", pp, 1, m)):
        live = peak = 0
        for kind, _, _ in order:
            live += 1 if kind == "F" else -1 if kind == "W" else 0
            peak = max(peak, live)
        assert peak <= entry.in_flight.count(pp, 1, m, s)


@pytest.mark.parametrize("name", ["1f1b", "gpipe", "zb-h1"])
@pytest.mark.parametrize("pp, vpp, m", [c for c in CASES if c[1] == 1])
def test_a_stage_holds_at_most_its_in_flight_micro_batches(name, pp, vpp, m):
    """1F1B, GPipe: in_flight; ZB-H1 frees a micro-batch at its W and holds at most p (1F1B's peak,
    stage 0's), its later stages more than 1F1B's p − s as their W passes wait."""
    entry = SCHEDULES[name]
    freed = "W" if entry.split_backward else "B"
    for s, order in enumerate(schedule_order(name, pp, 1, m)):
        live = peak = 0
        for kind, _, _ in order:
            live += 1 if kind == "F" else -1 if kind == freed else 0
            peak = max(peak, live)
        limit = min(pp, m) if name == "zb-h1" else entry.in_flight.count(pp, 1, m, s)
        assert peak <= limit


@pytest.mark.parametrize("pp, m", [(2, 4), (4, 1), (4, 2), (4, 8), (8, 16), (8, 5)])
@pytest.mark.parametrize("f, b, w", [(1.0, 1.0, 1.0), (1.0, 1.2, 0.8), (1.0, 1.5, 0.5)])
def test_zb_h1_placed_takes_its_bubble(pp, m, f, b, w):
    """Equal stages, W <= F: m·(F + B + W) + (p − 1)·(F + B + W)·share (Qi et al. 2023 §3.1, with
    the composition's W credit c); B here the input-gradient pass, B + W the whole backward."""
    times = [{"F": f, "B": b, "W": w}] * pp
    bars = place(schedule_order("zb-h1", pp, 1, m), times, 1)
    work = f + b + w
    share = zb_h1_bubble_share(f, b + w, w, zb_h1_w_credit(pp, m))
    assert max(x["end"] for x in bars) == pytest.approx(m * work + (pp - 1) * work * share)


def test_warmups_by_hand():
    """The warm-up forwards of stage s (issue 31: one function each, which the orders and the in-flight counts
    read): 1F1B p − s − 1; interleaved 2·(p − s − 1) + (v − 1)·p chunks (Megatron-LM's num_warmup_microbatches)."""
    assert [one_f_one_b_warmup(4, s) for s in range(4)] == [3, 2, 1, 0]
    assert [interleaved_warmup(4, 2, s) for s in range(4)] == [10, 8, 6, 4]
    first = schedule_order("interleaved", 4, 2, 8)[0]
    assert [kind for kind, _, _ in first[:11]] == ["F"] * 10 + [
        "F"
    ]  # 10 warm-up, then 1F1B's F then B
    assert first[11][0] == "B"


def test_interleaved_order_refuses_a_count_the_rule_refuses():
    """No silent 1F1B: m not a multiple of p is refused with specs.rules.interleave_batch_rule's words."""
    with pytest.raises(ValueError, match=r"micro-batches \(6\) to be a multiple of pp=4"):
        schedule_order("interleaved", 4, 2, 6)
