"""The pipeline-schedule registry (step/schedules.py): each entry's in-flight count against its
source, the selection by GridKnobs flags, the search floors admissible, and the registry in
agreement with the plan's Literal, GridKnobs, the search space and docs/architecture.md."""

from dataclasses import fields
from pathlib import Path
from typing import get_args

import numpy as np
import pytest
from pytest import approx

from paraplan.search import space
from paraplan.specs.plan import Schedule
from paraplan.specs.rules_schedule import SCHEDULE_RULES, schedule_batch_rule, schedule_vpp_rule
from paraplan.step.block_terms import BLOCK_TERM_NAMES
from paraplan.step.inputs import GridKnobs
from paraplan.step.schedules import (
    SCHEDULE_FLAGS,
    SCHEDULES,
    PipelineWork,
    in_flight_microbatches,
    least_in_flight_microbatches,
    markdown_table,
    pipeline_bubble_s,
    schedule_step_floor,
    weight_copies,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def _knobs(schedule: str, vpp: int = 1, **flags) -> GridKnobs:
    on = {flag: schedule == name for name, flag in SCHEDULE_FLAGS.items()} | flags
    off = dict.fromkeys(("zero", "overlap_dp_grad_reduce", "overlap_param_gather"), 0)
    offloads = dict.fromkeys(("offload_weights", "offload_activations", "offload_optimizer"), False)
    return GridKnobs(vpp=vpp, **on, **off, **offloads)


def test_in_flight_1f1b():
    # min(pp - stage, m) (Narayanan et al. 2021 §2.2.1)
    one = SCHEDULES["1f1b"].in_flight.count
    assert (one(4, 1, 8, 0), one(4, 1, 8, 3), one(4, 1, 2, 0)) == (4, 1, 2)


def test_in_flight_interleaved():
    inter = SCHEDULES["interleaved"].in_flight.count
    # stage 0: pp*(1 + (pp-1)/(pp*vpp)); pp=4, vpp=2: 4 * (1 + 3/8) = 5.5 (Korthikanti §4.3)
    assert inter(4, 2, 8, 0) == approx(5.5)
    # pp=8, vpp=3: 8 * (1 + 7/24) = 31/3
    assert inter(8, 3, 16, 0) == approx(31 / 3)
    # last stage, pp=4, vpp=2: (2*0 + 1*4 + 1) chunks / 2 = 2.5
    assert inter(4, 2, 8, 3) == approx(2.5)
    # capped at m·v chunks: m = 2, pp = 8 -> 2 micro-batches
    assert inter(8, 2, 2, 0) == approx(2.0)


def test_in_flight_gpipe():
    assert SCHEDULES["gpipe"].in_flight.count(4, 1, 8, 0) == 8
    assert SCHEDULES["gpipe"].in_flight.count(4, 1, 8, 3) == 8


def test_every_schedule_holds_at_least_the_least_in_flight():
    """The search's activation floor (least_in_flight_microbatches) is at most every entry's count."""
    for pp in range(1, 17):
        for m in (1, 2, 3, pp - 1, pp, pp + 1, 2 * pp, 64):
            for stage in range(pp):
                least = least_in_flight_microbatches(pp, max(m, 1), stage)
                for s in SCHEDULES.values():
                    for vpp in (2, 3, 4) if s.name == "interleaved" else (1,):
                        assert s.in_flight.count(pp, vpp, max(m, 1), stage) >= least - 1e-12, (
                            s,
                            pp,
                            m,
                        )


def test_selection_by_flags_on_arrays_is_each_entry():
    """by_schedule picks, per candidate, its own entry's value: one array of mixed schedules gives the
    same numbers as each schedule alone."""
    names = list(SCHEDULES)
    vpps = [2 if n == "interleaved" else 1 for n in names]
    mixed = GridKnobs(
        vpp=np.array(vpps),
        **{f: np.array([n == name for n in names]) for name, f in SCHEDULE_FLAGS.items()},
        **dict.fromkeys(("zero", "overlap_dp_grad_reduce", "overlap_param_gather"), 0),
        **dict.fromkeys(("offload_weights", "offload_activations", "offload_optimizer"), False),
    )
    parts = dict.fromkeys((*BLOCK_TERM_NAMES, "pp"), 0.0) | {"forward": 1.0, "backward": 2.5}
    work = PipelineWork(7 * 3.5 + 4.0, 4.0, 8, np.array(vpps), parts, 0.9, 16)
    bubbles = pipeline_bubble_s(mixed, work)
    in_flight = in_flight_microbatches(mixed, 8, 12, 2)
    copies = weight_copies(mixed)
    for i, (name, vpp) in enumerate(zip(names, vpps)):
        alone = _knobs(name, vpp)
        assert bubbles[i] == pipeline_bubble_s(alone, work._replace(vpp=vpp))
        assert bubbles[i] == SCHEDULES[name].bubble.exact_s(work._replace(vpp=vpp))
        assert in_flight[i] == in_flight_microbatches(alone, 8, 12, 2)
        assert copies[i] == SCHEDULES[name].weight_copies
    assert len(set(bubbles.tolist())) >= 4  # the entries differ


def test_search_floors_are_admissible():
    """m·S0 + bubble floor <= m·S + exact bubble for floors S0 <= S, T0 <= T, S0 <= F + B, and ρ
    bounding the weight-gradient share (W <= ρ·(F + B)/2), on random stages (deterministic)."""
    rng = np.random.default_rng(31)
    for _ in range(2000):
        pp, m = int(rng.integers(1, 17)), int(rng.integers(1, 65))
        forward, backward = rng.uniform(0.1, 2.0), rng.uniform(0.1, 4.0)
        rho = rng.uniform(0.0, 1.0)
        # W = Σ gemm_backward/2: at most ρ·(F + B)/2 and, the GEMMs being part of the backward, B/2
        wgrad = rng.uniform(0.0, 1.0) * min(rho * (forward + backward), backward) / 2.0
        slowest = forward + backward + rng.uniform(0.0, 0.5)  # + the stage's sends
        others = rng.uniform(0.0, 1.0, pp - 1) * slowest
        total = slowest + others.sum()
        s0 = rng.uniform(0.0, 1.0) * (forward + backward)
        t0 = s0 + rng.uniform(0.0, 1.0) * (total - slowest)
        parts = dict.fromkeys((*BLOCK_TERM_NAMES, "pp"), 0.0)
        parts |= {"forward": forward, "backward": backward}
        for s in SCHEDULES.values():
            v = int(rng.integers(2, 5)) if s.name == "interleaved" else 1
            exact = m * slowest + s.bubble.exact_s(
                PipelineWork(total, slowest, pp, v, parts, wgrad, m)
            )
            floor = schedule_step_floor(s.name, v, m, pp, s0, t0, rho)
            assert floor <= exact * (1 + 1e-12), (s.name, pp, m)


def test_dualpipe_stage_floor_by_hand():
    """m 20, p 4: n = 15 pairs; S0 2, K0 1.5, ρ 0.5: steady 5·2 + 15·max(1.5, 1) = 32.5, bubble
    (4/2 − 1)·max(1.5·(1 − 0.25), 2·0.5/2) = 1.125; K0 below S0/2 leaves the pair S0/2."""
    floor = SCHEDULES["dualpipe"].bubble.stage_floor_s
    assert floor(20, 4, 2.0, 1.5, 0.5) == approx((32.5, 1.125))
    assert floor(20, 4, 2.0, 0.4, 1.0) == approx((5 * 2.0 + 15 * 1.0, 0.4 / 2))
    assert schedule_step_floor("dualpipe", 1, 20, 4, 2.0, 9.0, 0.5, (32.5, 1.125)) == 33.625
    # without stage floors: the slowest stage's at K0 = 0, 5·2 + 15·1 + 0.5
    assert schedule_step_floor("dualpipe", 1, 20, 4, 2.0, 9.0, 0.5) == approx(25.5)


def test_dualpipe_stage_floor_is_admissible():
    """(m − n)·S + n·F&B + (p/2 − 1)·max(F&B + B − 3W, 0) with F&B = step.dualpipe.overlapped_pair_s is at
    least the stage floor for S0 <= S, K0 <= C/s' + X (s' = s where the pair has EP traffic) and ρ bounding
    the backward-GEMM share (W <= ρ·(F + B)/2, W <= backward/2), on random stages (deterministic)."""
    from paraplan.step.dualpipe import overlapped_pair_s, overlapped_pairs
    from paraplan.step.schedules import dualpipe_bubble_s

    rng = np.random.default_rng(13)
    floor = SCHEDULES["dualpipe"].bubble.stage_floor_s
    for _ in range(3000):
        pp, m = 2 * int(rng.integers(1, 9)), int(rng.integers(1, 129))
        parts = {name: float(rng.uniform(0.0, 1.0)) for name in (*BLOCK_TERM_NAMES, "pp")}
        if rng.uniform() < 0.3:
            parts["ep_forward"] = parts["ep_backward"] = 0.0
        share = float(rng.uniform(0.05, 1.0))
        exposed = parts["ep_forward"] + parts["ep_backward"]
        raw = exposed * (
            1.0 + float(rng.uniform(0.0, 2.0))
        )  # none hidden: at least the exposed part
        rho = float(rng.uniform(0.0, 1.5))
        compute = parts["forward"] + parts["backward"]
        wgrad = float(rng.uniform(0.0, 1.0)) * min(rho * compute, parts["backward"]) / 2.0
        work = sum(parts.values())
        pair = overlapped_pair_s(parts, raw, share)
        n = overlapped_pairs(pp, m)
        forward = parts["forward"] + parts["tp_forward"] + parts["cp_forward"] + parts["ep_forward"]
        backward = work - forward - parts["pp"]  # step.inputs.backward_s
        exact_steady = m * work - n * (work - pair)
        exact_bubble = dualpipe_bubble_s(pp, forward, backward, wgrad, pair)
        c = parts["forward"] + parts["backward"] + parts["recompute"]
        x = parts["tp_forward"] + parts["tp_backward"] + parts["cp_forward"] + parts["cp_backward"]
        kept = (c / (share if raw > 0.0 else 1.0) + x) * float(rng.uniform(0.0, 1.0))
        s0 = work * float(rng.uniform(0.0, 1.0))
        steady, bubble = floor(m, pp, s0, kept, rho)
        assert steady <= exact_steady * (1 + 1e-12), (pp, m)
        assert bubble <= exact_bubble * (1 + 1e-12) + 1e-15, (pp, m)


def test_registry_matches_the_plan_knobs_and_search():
    assert tuple(SCHEDULES) == get_args(Schedule)
    knob_fields = {f.name for f in fields(GridKnobs)}
    flagged = [s for s in SCHEDULES.values() if s.flag]
    assert {s.flag for s in flagged} <= knob_fields
    assert [s for s in SCHEDULES.values() if not s.flag] == [SCHEDULES["1f1b"]]
    assert space.SCHEDULES == tuple(SCHEDULES)
    assert set(space.SPLIT_BACKWARD_SCHEDULES) == {"zb-h1", "dualpipe"}


def test_every_entry_reads_its_plan_rules_from_specs():
    """Issue 31: a schedule's plan rules (vpp, micro-batch counts) are its specs.rules_schedule entry, which
    the plan checks, the search's options and the instruction orders ask (one entry per schedule)."""
    assert tuple(SCHEDULE_RULES) == tuple(SCHEDULES)
    assert all(entry.rules is SCHEDULE_RULES[name] for name, entry in SCHEDULES.items())
    assert [r.name for r in SCHEDULE_RULES.values() if r.chunked] == ["interleaved"]
    assert schedule_batch_rule("interleaved", 4, 6) and not schedule_batch_rule("interleaved", 4, 8)
    assert schedule_batch_rule("dualpipe", 4, 6) and not schedule_batch_rule("dualpipe", 4, 8)
    assert not any(schedule_batch_rule(n, 4, 3) for n in ("1f1b", "gpipe", "zb-h1"))
    assert schedule_vpp_rule("gpipe", 2) == "schedule=gpipe cannot use vpp=2; use 'interleaved'"
    assert schedule_vpp_rule("interleaved", 1).startswith("schedule=interleaved needs vpp > 1")
    assert schedule_vpp_rule("interleaved", 2) is None and schedule_vpp_rule("1f1b", 1) is None


def test_docs_list_the_registry():
    """docs/architecture.md's schedule table is markdown_table() (regenerate it from the registry)."""
    assert markdown_table() in DOCS.read_text(), markdown_table()


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_every_entry_cites_its_source(name):
    entry = SCHEDULES[name]
    assert entry.source and entry.bubble.exact_s.__doc__ and entry.in_flight.count.__doc__
    # the search's floor of the bubble: floor_s, or the stage floors where the schedule has them (DualPipe)
    assert (entry.bubble.floor_s or entry.bubble.stage_floor_s).__doc__
