"""Hand-worked cases of the step composition (step/compose.py, step/tail.py, step/stage_memory.py): every number below is computed
by hand in the comment beside it, so a wrong factor in the pipeline, the overlap windows, the
ZeRO tail or the per-stage memory fails here."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pytest import approx

from paraplan.cost.comm import LinearCollective
from paraplan.step.compose import (
    BlockCost,
    BlockTerms,
    GradientGroup,
    GridKnobs,
    Stage,
    StepInputs,
    compose_step,
    stage_memory_terms,
    stage_peaks,
)

GiB = 2**30
NO_COLLECTIVE = LinearCollective(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def terms(
    forward=0.0, backward=0.0, recompute=0.0, tp_f=0.0, tp_b=0.0, cp_f=0.0, cp_b=0.0
) -> BlockTerms:
    return BlockTerms(forward, backward, recompute, tp_f, tp_b, cp_f, cp_b)


def block(kind, t, params=0.0, kept=0.0, held=0.0, buffer=0.0) -> BlockCost:
    return BlockCost(kind, t, params, kept, held, buffer)


def inputs(
    stages,
    *,
    pp,
    microbatches,
    group=None,
    zero=0,
    vpp=1,
    interleaved=False,
    gpipe=False,
    overlap_grad=True,
    overlap_gather=True,
    hbm_rate=54e6,
) -> StepInputs:
    knobs = GridKnobs(
        vpp=vpp,
        interleaved=interleaved,
        gpipe=gpipe,
        zero=zero,
        overlap_dp_grad_reduce=overlap_grad,
        overlap_param_gather=overlap_gather,
        offload_weights=False,
        offload_activations=False,
        offload_optimizer=False,
    )
    return StepInputs(
        stages=tuple(stages),
        pp=pp,
        microbatches=microbatches,
        knobs=knobs,
        gradient_groups={
            "dense": group or GradientGroup(1, NO_COLLECTIVE, NO_COLLECTIVE, NO_COLLECTIVE)
        },
        host_bandwidth=1.0,
        hbm_rate=hbm_rate,
        weight_bytes=2.0,
        param_gather_bytes=2.0,
        gathered_weight_bytes=2.0,
        gathered_outside_bytes=2.0,
        grad_bytes=4.0,
        optimizer_bytes=12.0,
        reserved_bytes=1 * GiB,
    )


def test_two_stage_pipeline_by_hand():
    emb = block("embedding", terms(forward=1.0, backward=2.0))
    dec = block("decoder", terms(forward=1.0, backward=2.0), params=1e6)
    head = block("head", terms(forward=0.5, backward=1.0))
    first = Stage(0, 1, ((emb, 1), (dec, 2), (head, 0)), 0.1)
    last = Stage(1, 1, ((emb, 0), (dec, 2), (head, 1)), 0.1)
    out = compose_step(inputs([first, last], pp=2, microbatches=4))
    # W0 = 3 + 2·3 + 0.1 = 9.1 (slowest); W1 = 2·3 + 1.5 + 0.1 = 7.6
    assert out["forward_s"] == approx(4 * 3.0)  # m · (1 + 2·1)
    assert out["backward_s"] == approx(4 * 6.0)
    assert out["pp_comm_s"] == approx(0.4)
    assert out["bubble_s"] == approx(7.6)  # (ΣW − W_max)/v = 16.7 − 9.1
    # optimizer: 2e6 params · 54 B / 54e6 B/s = 2 s on either stage; no data parallelism
    assert out["optimizer_s"] == approx(2.0)
    assert out["dp_comm_s"] == 0.0
    assert out["step_time_s"] == approx(4 * 9.1 + 7.6 + 2.0)  # 46.0


def test_interleaving_divides_the_bubble_by_vpp():
    dec = block("decoder", terms(forward=1.0, backward=2.0))
    stages = [Stage(0, 1, ((dec, 2),), 0.0), Stage(1, 3, ((dec, 2),), 0.0)]
    one = compose_step(inputs(stages, pp=4, microbatches=8))
    two = compose_step(inputs(stages, pp=4, microbatches=8, vpp=2, interleaved=True))
    assert one["bubble_s"] == approx(3 * 6.0)  # three other stages of 6 s each
    assert two["bubble_s"] == approx(3 * 6.0 / 2)


def zero3_case(**changes):
    """One stage, m = 2, ZeRO-3 over 4 ranks on one NVLink tier of 1e-8 s/B and overlap cost 0.25."""
    link = LinearCollective(1e-8, 0.0, 0.0, 0.0, 0.25, 0.0)
    t = dict(forward=0.5, backward=1.0, tp_f=0.1, tp_b=0.2) | changes
    dec = block("decoder", terms(**t), params=1e8)
    stage = Stage(0, 1, ((dec, 1),), 0.0)
    return inputs(
        [stage],
        pp=1,
        microbatches=2,
        zero=3,
        group=GradientGroup(4, link, link, link),
        hbm_rate=54e8,
    )


def test_zero3_windows_by_hand():
    out = compose_step(zero3_case())
    # all-gather 1e8 params · 2 B · 1e-8 s/B = 2 s; reduce-scatter 1e8 · 4 B · 1e-8 = 4 s
    # ZeRO-3 gathers block by block, prefetching one block ahead (cost.overlap.prefetched_gather_exposed_s):
    # with a single block the first (and only) gather of each pass has nothing to hide behind, so
    # forward 2 s and backward 2 + 4 = 6 s are exposed: 8 s = the whole traffic, no price on top;
    # × 2 micro-batches = 16
    assert out["dp_comm_s"] == approx(16.0)
    # optimizer: 1e8 / 4 owned params · 54 B / 54e8 B/s = 0.25 s
    assert out["optimizer_s"] == approx(0.25)
    assert out["step_time_s"] == approx(2 * 1.8 + 16.0 + 0.25)


def test_zero3_prefetch_hides_all_but_the_first_block():
    # the same traffic over 4 blocks of 2.5e7 params: per block gather 0.5 s, reduce-scatter 1 s;
    # forward window 4 · 0.6 = 2.4 (0.6 per block), backward 4 · 1.2 = 4.8 (1.2 per block)
    # forward: 0.5 + 3 · max(0, 0.5 − 0.6) = 0.5; backward: 1.5 + 3 · max(0, 1.5 − 1.2) = 2.4
    # exposed 2.9 of 4 · (2 · 0.5 + 1) = 8 s, price 0.25 · 8 = 2: 2.9 + (8 − 2.9) · 2/8 = 4.175; × 2 = 8.35
    link = LinearCollective(1e-8, 0.0, 0.0, 0.0, 0.25, 0.0)
    dec = block("decoder", terms(forward=0.5, backward=1.0, tp_f=0.1, tp_b=0.2), params=2.5e7)
    stage = Stage(0, 1, ((dec, 4),), 0.0)
    inp = inputs(
        [stage],
        pp=1,
        microbatches=2,
        zero=3,
        group=GradientGroup(4, link, link, link),
        hbm_rate=54e8,
    )
    assert compose_step(inp)["dp_comm_s"] == approx(8.35)


def test_faster_tp_never_slows_zero3():
    """The issue's bug: TP time counted in both windows let faster TP lengthen ZeRO-3 exposure."""
    slow = compose_step(zero3_case(tp_f=0.3, tp_b=0.6))["step_time_s"]
    fast = compose_step(zero3_case(tp_f=0.15, tp_b=0.3))["step_time_s"]
    assert fast < slow


def test_zero1_gradient_reduce_hides_behind_the_backward_window():
    link = LinearCollective(1e-9, 0.0, 0.0, 0.0, 0.25, 0.0)
    dec = block("decoder", terms(forward=0.5, backward=1.0, tp_f=0.4), params=1e8)
    inp = inputs(
        [Stage(0, 1, ((dec, 1),), 0.0)],
        pp=1,
        microbatches=2,
        zero=1,
        group=GradientGroup(4, link, link, link),
        hbm_rate=54e8,
    )
    out = compose_step(inp)
    # 1e8 params in buckets of max(40M, 1M · 4) = 40M: 3 buckets; the last one is produced when the
    # backward ends (cost.overlap.bucketed_reduce_exposed_s):
    # reduce-scatter 0.4 s, backward window 1.0 (forward TP is not in it): 0.4/3 + max(0, ⅔·(0.4 − 1)) = 0.1333
    # all-gather 0.2 s, forward window 0.9: 0.2/3 = 0.0667; exposed 0.2 of 0.6 s, price 0.25 · 0.6 = 0.15:
    # 0.2 + (0.6 − 0.2) · 0.15/0.6 = 0.3
    assert out["dp_comm_s"] == approx(0.3)
    off = compose_step(
        inputs(
            [Stage(0, 1, ((dec, 1),), 0.0)],
            pp=1,
            microbatches=2,
            zero=1,
            overlap_grad=False,
            overlap_gather=False,
            group=GradientGroup(4, link, link, link),
            hbm_rate=54e8,
        )
    )
    assert off["dp_comm_s"] == approx(0.6)  # nothing overlaps: 0.4 + 0.2


def test_stage_memory_by_hand():
    emb = block("embedding", terms(), params=1e6, kept=0.5 * GiB)
    dec = block("decoder", terms(), params=1e7, kept=1 * GiB, buffer=0.25 * GiB)
    head = block("head", terms(), params=1e6, held=3 * GiB)
    group = GradientGroup(4, NO_COLLECTIVE, NO_COLLECTIVE, NO_COLLECTIVE)
    first = Stage(0, 1, ((emb, 1), (dec, 2), (head, 0)), 0.0)
    middle = Stage(1, 2, ((emb, 0), (dec, 2), (head, 0)), 0.0)
    last = Stage(3, 1, ((emb, 0), (dec, 2), (head, 1)), 0.0)
    inp = inputs([first, middle, last], pp=4, microbatches=8, zero=1, group=group)
    m0 = stage_memory_terms(inp, first, 0)
    # 21e6 params: weights 2 B, gradients 4 B, optimizer 12 B / 4 ZeRO-1 ranks
    assert m0["weights_bytes"] == approx(21e6 * 2)
    assert m0["gradients_bytes"] == approx(21e6 * 4)
    assert m0["optimizer_bytes"] == approx(21e6 * 3)
    # 1F1B: stage 0 holds pp − 0 = 4 micro-batches of (2 layers + embedding) = 4 · 2.5 GiB
    assert m0["activations_bytes"] == approx(10 * GiB)
    assert m0["transformer_activations_bytes"] == approx(8 * GiB)
    assert m0["transformer_weights_and_optimizer_bytes"] == approx(2e7 * (2 + 4 + 3))
    assert m0["buffers_bytes"] == approx(0.25 * GiB)
    assert m0["peak_bytes"] == approx(21e6 * 9 + 10 * GiB + 0.25 * GiB + 1 * GiB)
    # the middle entry stands for stages 1 and 2: 3 and 2 micro-batches in flight
    assert stage_memory_terms(inp, middle, 1)["activations_bytes"] == approx(3 * 2 * GiB)
    assert stage_memory_terms(inp, middle, 2)["activations_bytes"] == approx(2 * 2 * GiB)
    # last stage: 1 micro-batch of 2 layers + the LM head's logits held once
    assert stage_memory_terms(inp, last, 3)["activations_bytes"] == approx(2 * GiB + 3 * GiB)
    peak, _ = stage_peaks(inp)
    assert peak == approx(m0["peak_bytes"])


def test_absent_stage_entries_do_not_count():
    dec = block("decoder", terms(forward=1.0, backward=1.0))
    present = Stage(0, 1, ((dec, 4),), 0.0)
    absent = Stage(1, 0, ((dec, 100),), 0.0)
    out = compose_step(inputs([present, absent], pp=1, microbatches=2))
    assert out["step_time_s"] == approx(2 * 8.0)


@pytest.mark.parametrize(
    "zero, expected",
    [  # (weights, gradients, optimizer state) bytes: dense over 8 ranks + experts over 2
        (0, (2e9 + 2e9, 4e9 + 4e9, 12e9 + 12e9)),
        (1, (2e9 + 2e9, 4e9 + 4e9, 1.5e9 + 6e9)),
        (2, (2e9 + 2e9, 0.5e9 + 2e9, 1.5e9 + 6e9)),
        (3, (0.25e9 + 1e9, 0.5e9 + 2e9, 1.5e9 + 6e9)),
    ],
)
def test_zero_shards_the_state_over_each_gradient_group(zero, expected):
    """ZeRO §5 with 2 + 4 + 12 B per parameter: stage 1 shards the optimizer state over the group,
    2 also the gradients, 3 also the weights; 1e9 dense parameters over 8 ranks and 1e9 expert
    parameters over their own group of 2 (the expert-data-parallel group)."""
    dense = block("decoder", terms(), params=1e9)
    experts = BlockCost("experts", terms(), 1e9, 0.0, 0.0, 0.0, gradient_group="expert")
    inp = inputs(
        [Stage(0, 1, ((dense, 1), (experts, 1)), 0.0)],
        pp=1,
        microbatches=1,
        group=GradientGroup(8, NO_COLLECTIVE, NO_COLLECTIVE, NO_COLLECTIVE),
        zero=zero,
    )
    expert_group = GradientGroup(2, NO_COLLECTIVE, NO_COLLECTIVE, NO_COLLECTIVE)
    inp = replace(inp, gradient_groups=inp.gradient_groups | {"expert": expert_group})
    out = stage_memory_terms(inp, inp.stages[0], 0)
    got = (out["weights_bytes"], out["gradients_bytes"], out["optimizer_bytes"])
    assert got == tuple(approx(x) for x in expected)
