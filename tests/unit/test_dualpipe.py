"""DualPipe's overlapped forward-backward pair (step.dualpipe) against hand-computed values, and the
pairs of its order (step.schedule_orders.dualpipe_pairs) against deepseek-ai/DualPipe's step counts."""

from __future__ import annotations

import numpy as np
import pytest

from paraplan.step.dualpipe import (
    overlapped_pair_s,
    overlapped_pairs,
    pair_compute_s,
    pair_compute_share,
    pair_saving_s,
)
from paraplan.step.schedule_orders import dualpipe_order, dualpipe_pairs

PARTS = {
    "forward": 1.0,
    "backward": 2.0,
    "recompute": 0.2,
    "tp_forward": 0.1,
    "tp_backward": 0.1,
    "cp_forward": 0.0,
    "cp_backward": 0.0,
    "ep_forward": 0.4,
    "ep_backward": 0.6,
    "pp": 0.3,
}


def test_the_sm_share_left_to_compute():
    """DeepSeek-V3 §3.2.2: 20 of the H800's 132 SMs to communication."""
    assert pair_compute_share(132, 20) == pytest.approx(112 / 132)
    assert pair_compute_share(132, 0) == 1.0
    assert pair_compute_share(132, 500) == pytest.approx(1 / 132)  # never no SM at all


def test_the_pair_compute_is_slowed_only_where_it_dispatches():
    """C/s with expert-parallel communication, C without (the search's floors read the same helper)."""
    assert pair_compute_s(3.0, True, 0.75) == pytest.approx(4.0)
    assert pair_compute_s(3.0, False, 0.75) == 3.0
    both = pair_compute_s(np.array([3.0, 3.0]), np.array([True, False]), 0.75)
    assert both.tolist() == pytest.approx([4.0, 3.0])


def test_the_pair_by_hand():
    share = 112 / 132
    slowed = 3.2 / share  # 3.7714: forward + backward + recompute on 112 SMs
    # the dispatch / combine (2.5 s) and the sends (0.3 s) hide behind it; TP (0.2 s) stays
    assert overlapped_pair_s(PARTS, 2.5, share) == pytest.approx(slowed + 0.2)
    assert overlapped_pair_s(PARTS, 2.5, share) == pytest.approx(3.971428571)
    # more communication than compute: the rest shows, 5.3 − 3.7714
    assert overlapped_pair_s(PARTS, 5.0, share) == pytest.approx(5.3 + 0.2)
    # no expert-parallel communication: no SMs given, the sends hidden behind the whole compute
    assert overlapped_pair_s(PARTS, 0.0, share) == pytest.approx(3.2 + 0.2)
    out = overlapped_pair_s(PARTS, np.array([0.0, 2.5, 5.0]), share)
    assert out.tolist() == pytest.approx([3.4, 3.971428571, 5.5])


def test_the_pairs_a_step_overlaps():
    """m − p − 1 on the middle ranks: 2·(m/2 − p + h + 1) − 1 in step 4, p/2 − h − 1 in step 5."""
    assert overlapped_pairs(16, 120) == 103
    assert overlapped_pairs(8, 16) == 7
    assert overlapped_pairs(4, 4) == 0
    # S = F + B + p2p apart (the EP exposed 1 s, sends 0.3 s): 3.2 + 0.2 + 1.0 + 0.3 = 4.7 s
    work = sum(PARTS.values())
    assert work == pytest.approx(4.7)
    assert pair_saving_s(16, 120, work, 3.971428571) == pytest.approx(103 * (4.7 - 3.971428571))


@pytest.mark.parametrize("pp, m", [(4, 8), (8, 16), (8, 40), (16, 32), (16, 120)])
def test_the_order_pairs_as_dualpipe_step_does(pp, m):
    """Each pair is an F, then the B and W of a whole backward, of the two directions; the middle
    ranks run m − p − 1 of them (``overlapped_pairs``), the end ranks m − 3p/2 + 1."""
    for s in range(pp):
        order, pairs = dualpipe_order(pp, 1, m, s), dualpipe_pairs(pp, 1, m, s)
        for i in pairs:
            (f, _, d0), (b, _, d1), (w, _, d2) = order[i : i + 3]
            assert (f, b, w) == ("F", "B", "W") and d0 != d1 == d2
        h = min(s, pp - 1 - s)
        expected = m - 3 * pp // 2 + h + 1 - (h == pp // 2 - 1)
        assert len(pairs) == expected
    assert len(dualpipe_pairs(pp, 1, m, pp // 2)) == overlapped_pairs(pp, m)


def test_a_rank_holds_its_stage_pair():
    """DeepSeek-V3 Table 2 (2× parameters, PP + 1 micro-batches) with unequal end stages: rank i holds
    stage i one way and stage p − 1 − i the other (deepseek-ai/DualPipe's example), so the first and the
    last rank hold the same two stages, p − i micro-batches of stage i and i + 1 of stage p − 1 − i."""
    from paraplan.step.stage_memory import StageHoldings, paired_holdings

    def holding(weights, kept, held):
        return StageHoldings(weights, 2 * weights, 1.0, 0.0, kept, kept, held, 0.0, 0.0, 0.0, 0.5)

    first, last = holding(5.0, 2.0, 0.0), holding(3.0, 4.0, 1.5)
    h, in_flight = paired_holdings(first, last, 0, 16, 32)
    assert in_flight == 17
    assert (h.weights, h.grads, h.optimizer, h.held) == (8.0, 16.0, 1.0, 1.5)
    assert in_flight * h.kept == pytest.approx(16 * 2.0 + 1 * 4.0)
    h, in_flight = paired_holdings(
        last, first, 15, 16, 32
    )  # rank 15: stage 15 one way, stage 0 the other
    assert in_flight * h.kept == pytest.approx(1 * 4.0 + 16 * 2.0)
    assert h.weights == 8.0


def test_a_ranks_pairing_is_read_from_the_schedule_entry(monkeypatch):
    """paired_holdings takes the copies and the in-flight count from SCHEDULES["dualpipe"] (issue 31: each
    schedule in one entry): a changed entry changes them (3 copies: own + 2 × partner; in flight 5)."""
    from dataclasses import replace

    from paraplan.step import stage_memory
    from paraplan.step.schedules import SCHEDULES, InFlight
    from paraplan.step.stage_memory import StageHoldings, paired_holdings

    h0 = StageHoldings(5.0, 10.0, 1.0, 0.0, 2.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.5)
    h1 = StageHoldings(3.0, 6.0, 1.0, 0.0, 4.0, 4.0, 1.5, 0.0, 0.0, 0.0, 0.5)
    entry = SCHEDULES["dualpipe"]
    assert (entry.weight_copies, entry.in_flight.count(16, 1, 32, 0)) == (2.0, 17)
    changed = replace(entry, weight_copies=3.0, in_flight=InFlight(lambda p, v, m, i: 5, "5"))
    monkeypatch.setattr(stage_memory, "SCHEDULES", {**SCHEDULES, "dualpipe": changed})
    h, in_flight = paired_holdings(h0, h1, 0, 16, 32)
    assert (h.weights, h.grads, in_flight) == (5.0 + 2 * 3.0, 10.0 + 2 * 6.0, 5)


def test_the_deepseek_v3_layout_holds_both_end_stages_on_its_end_ranks():
    """The README's DeepSeek-V3 layout (pp 16, 4 / 1 layers on the end stages): ranks 0 and 15 hold
    stages 0 and 15, each the sum of the two stages' weights under 1F1B; a middle rank twice its own."""
    from paraplan import api

    plan = dict(
        gpus=2048,
        pp=16,
        ep=64,
        global_batch=15360,
        seq_length=4096,
        dtype="fp8",
        zero=1,
        moe_dispatcher="deepep",
        moe_a2a_overlap=True,
        recompute="selective",
        recompute_modules=["mla_up_proj", "moe_act", "layernorm"],
        layers_first_stage=4,
        layers_last_stage=1,
    )
    one = api.estimate("deepseek-v3", "dgx-h800", plan)
    dual = api.estimate("deepseek-v3", "dgx-h800", plan | {"schedule": "dualpipe"})
    pair = one.stages[0].weights_bytes + one.stages[15].weights_bytes
    assert dual.stages[0].weights_bytes == pytest.approx(pair)
    assert dual.stages[15].weights_bytes == pytest.approx(pair)
    assert dual.stages[5].weights_bytes == pytest.approx(2 * one.stages[5].weights_bytes)
    # 1F1B holds p − i micro-batches; DualPipe p − i of stage i and i + 1 of stage p − 1 − i
    a0 = one.stages[0].activations_bytes / 16
    a15 = one.stages[15].activations_bytes  # one micro-batch in flight on the last stage
    assert dual.stages[0].activations_bytes == pytest.approx(16 * a0 + a15, rel=0.05)
    # the search's peak (step.stage_memory.stage_peaks, over the Stage entries) is the table's largest
    from paraplan.specs.plan import PlanSpec
    from paraplan.step.compose import stage_peaks
    from paraplan.step.estimate import step_inputs

    model, system = api.load_model("deepseek-v3"), api.load_system("dgx-h800")
    inp = step_inputs(model, system, PlanSpec(**plan, schedule="dualpipe"))
    peak = max(s.peak_bytes for s in dual.stages)
    assert float(stage_peaks(inp)[0]) == pytest.approx(peak, rel=1e-12)


def test_torchtitan_export_refuses_the_schedules_it_does_not_write():
    """A DualPipe or ZB-H1 plan is refused by name (it raised KeyError inside ``search``'s launch
    column once a DualPipe plan reached the schedule field)."""
    from paraplan.export import export_plan
    from paraplan.specs.errors import InputError
    from paraplan.specs.plan import PlanSpec

    for schedule in ("dualpipe", "zb-h1"):
        plan = PlanSpec(gpus=16, pp=4, global_batch=64, seq_length=2048, schedule=schedule)
        with pytest.raises(InputError):
            export_plan("torchtitan", plan)


def test_a_split_group_of_two_link_classes_holds_every_rank_pair():
    """gpt3-125m, pp 8 on 2-GPU stages (cp 2) of 8-GPU nodes: the split's middle group (stages 1-4, two layers
    each) is two Stage entries at one index, one per link class (step.layout.build_step_inputs), so the group
    covers positions 1-4, not 1-2 (step.stage_memory.group_count). Rank i holds stage i and stage 7 − i, each
    the sum of the two 1F1B ranks' weights: rank 3 stages 3 and 4 (2 × 28.35 MB; before: 28.35 MB, position 4
    found in no entry and the last entry's one-layer holdings taken); the search's peak
    (step.stage_memory.stage_peaks) is the table's largest."""
    from paraplan import api
    from paraplan.specs.plan import PlanSpec
    from paraplan.step.compose import stage_peaks
    from paraplan.step.estimate import step_inputs

    plan = dict(gpus=16, cp=2, pp=8, global_batch=16, seq_length=1024, zero=1)
    one = api.estimate("gpt3-125m", "dgx-b200", plan)
    dual = api.estimate("gpt3-125m", "dgx-b200", plan | {"schedule": "dualpipe"})
    inp = step_inputs(
        api.load_model("gpt3-125m"), api.load_system("dgx-b200"), PlanSpec(**dual.plan)
    )
    assert [s.index for s in inp.stages].count(1) == 2  # the middle group's two link classes
    for i in range(8):
        pair = one.stages[i].weights_bytes + one.stages[7 - i].weights_bytes
        assert dual.stages[i].weights_bytes == pytest.approx(pair, rel=1e-12), i
    assert dual.stages[3].weights_bytes == pytest.approx(2 * 28_351_488.0, rel=1e-9)
    peak = max(s.peak_bytes for s in dual.stages)
    assert float(stage_peaks(inp)[0]) == pytest.approx(peak, rel=1e-12)
