"""step.bf16_optimizer_sync: where DeepSpeed runs its BF16_Optimizer (zero 0; zero 1 with fp32 gradients on the
GPU) its own data-parallel traffic, an all-reduce of the whole gradient and, after the step over its fp32 partition,
an all-gather of the bf16 weights (runtime/bf16_optimizer.py update_lp_params → all_gather_dp_groups, 0050fdad),
in place of ZeRO's reduce-scatter + all-gather."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from paraplan.api import estimate
from paraplan.cost.runtimes import bf16_optimizer_clear_bytes, deepspeed_allreduce_copy_bytes
from paraplan.catalog import load_system
from paraplan.step import bf16_optimizer_sync as bf16_sync
from paraplan.step import tail
from paraplan.step.bf16_optimizer_sync import (
    bf16_optimizer_clear_extra_bytes,
    bf16_optimizer_kinds,
    bf16_optimizer_norm_extra_bytes,
    bf16_optimizer_traffic,
    optimizer_shard_ways,
)

H100 = "dgx-h100-80gb"
PLAN = {"gpus": 8, "micro_batch": 4, "global_batch": 64, "seq_length": 2048, "dtype": "bf16"}


def _inp(zero, zero1: bool, stack_runs_it: bool = True, offload=False):
    """The fields the rule reads: the knobs and StepInputs.zero_stage_terms (BF16_Optimizer's terms,
    the others', whether it runs at zero 1, the other optimizers' accumulation), empty where the stack never
    runs DeepSpeed's optimizers."""
    terms = ({"grad_bytes": 4.0}, {"grad_bytes": 2.0}, zero1, ()) if stack_runs_it else ()
    return SimpleNamespace(
        knobs=SimpleNamespace(zero=zero, offload_optimizer=offload), zero_stage_terms=terms
    )


def _traffic():
    return {"all_reduce": 10.0, "reduce_scatter": 4.0, "all_gather": 3.0}, {
        "all_reduce": 1.0,
        "reduce_scatter": 0.4,
        "all_gather": 0.3,
    }


def test_candidates_by_hand():
    """Candidates at zero 0, 1, 2 with fp32 gradients stated (zero1 True): zero 0 adds the 3 s all-gather
    after the step; zero 1 reduces by the 10 s all-reduce and its gather loses the 5 s window; zero 2 keeps
    ZeRO's traffic."""
    time, price = _traffic()
    zero = np.array([0, 1, 2])
    window, after = bf16_optimizer_traffic(_inp(zero, True), time, price, 5.0)
    assert list(window) == [0.0, 0.0, 5.0]
    assert list(after) == [3.0, 3.0, 0.0]  # tail_terms adds it on the ZeRO-0 branch only
    assert list(time["reduce_scatter"]) == [10.0, 10.0, 4.0]
    assert list(price["reduce_scatter"]) == [1.0, 1.0, 0.4]


def test_zero1_without_fp32_gradients_and_other_stacks_keep_zero():
    fp16 = SimpleNamespace(  # DeepSpeed's other optimizers' terms only (an fp16 run)
        knobs=SimpleNamespace(zero=0, offload_optimizer=False),
        zero_stage_terms=({}, {"grad_accumulation_bytes": 0.0}, False, (6.0, 6.0)),
    )
    cases = (_inp(1, False), _inp(0, True, stack_runs_it=False), _inp(1, True, offload=True), fp16)
    for inp in cases:
        time, price = _traffic()
        assert bf16_optimizer_traffic(inp, time, price, 5.0) == (5.0, 0.0)
        assert time["reduce_scatter"] == 4.0 and price["reduce_scatter"] == 0.4
    assert bf16_optimizer_kinds(_inp(0, False)) == ("all_reduce", "all_gather")
    assert bf16_optimizer_kinds(_inp(0, False, stack_runs_it=False)) == ()
    assert bf16_optimizer_kinds(fp16) == ()


def test_zero0_all_gather_by_hand(monkeypatch):
    """GPT-3 1.3B on 8 H100s (NVSwitch, 450 GB/s at 0.75, 5 us a hop), deepspeed profile, bf16, zero 0: the
    step's data-parallel seconds grow by the all-gather of the P bf16 weights, in the DP buckets of
    step.tail (ceil(P / 40M) calls): 7/8 · 2P / 337.5 GB/s + ceil(P / 40M) · 7 · 5 us."""
    e = estimate("gpt3-1.3b", H100, framework="deepspeed", zero=0, **PLAN)
    monkeypatch.setattr(tail, "bf16_optimizer_traffic", lambda inp, t, p, g: (g, 0.0))
    zero_only = estimate("gpt3-1.3b", H100, framework="deepspeed", zero=0, **PLAN)
    params = e.stages[0].weights_bytes / 2  # bf16 weights
    node = load_system(H100).node
    assert node.peer_bandwidth(7) == 337.5e9 and node.nvlink_latency == pytest.approx(5e-6)
    by_hand = 7 / 8 * 2 * params / 337.5e9 + math.ceil(params / 40e6) * 7 * 5e-6
    assert e.breakdown.dp_comm_s - zero_only.breakdown.dp_comm_s == pytest.approx(by_hand, rel=1e-9)


def test_zero1_with_fp32_gradients_runs_zero0_traffic():
    """One optimizer, one traffic: zero 1 with fp32 gradients (the BF16_Optimizer) reduces and gathers as zero 0,
    and more than ZeRO-1 with bf16 gradients (the ZeRO optimizer's reduce-scatter + all-gather)."""
    z0 = estimate("gpt3-1.3b", H100, framework="deepspeed", zero=0, **PLAN)
    bf16 = estimate("gpt3-1.3b", H100, framework="deepspeed", zero=1, **PLAN)
    fp32 = estimate("gpt3-1.3b", H100, framework="deepspeed", zero=1, grad_dtype="fp32", **PLAN)
    assert fp32.breakdown.dp_comm_s == pytest.approx(z0.breakdown.dp_comm_s, rel=1e-12)
    assert fp32.breakdown.dp_comm_s > bf16.breakdown.dp_comm_s


def test_optimizer_shard_ways_by_hand():
    """The optimizer state and step split over the group's 8 ranks wherever the BF16_Optimizer runs (zero 0,
    zero 1 with fp32 gradients), ZeRO's from stage 1 elsewhere: 1 at zero 0 on a stack that never runs it
    and on an fp16 run (DeepSpeed's FP16 optimizers keep the whole state)."""
    group = SimpleNamespace(size=8)
    zero = np.array([0, 1, 2, 3])
    assert list(optimizer_shard_ways(_inp(zero, True), group)) == [8, 8, 8, 8]
    assert list(optimizer_shard_ways(_inp(zero, False), group)) == [8, 8, 8, 8]
    assert list(optimizer_shard_ways(_inp(zero, True, stack_runs_it=False), group)) == [1, 8, 8, 8]
    fp16 = SimpleNamespace(
        knobs=SimpleNamespace(zero=0, offload_optimizer=False),
        zero_stage_terms=({}, {"grad_accumulation_bytes": 0.0}, False, (6.0, 6.0)),
    )
    assert optimizer_shard_ways(fp16, group) == 1


def test_zero0_state_bytes_per_param_by_hand():
    """GPT-3 1.3B on 8 H100s, deepspeed profile, bf16: per GPU and parameter, zero 0 holds the bf16 weights
    (2 B), the whole fp32 gradients (4 B: fp32_groups_gradients_flat) and 1/8 of the fp32 master + Adam
    moments (12 / 8 = 1.5 B: fp32_groups_flat_partition); zero 1 the same but bf16 gradients (2 B)."""
    per_param = {}
    for zero in (0, 1):
        s = estimate("gpt3-1.3b", H100, framework="deepspeed", zero=zero, **PLAN).stages[0]
        params = s.weights_bytes / 2  # bf16 weights
        per_param[zero] = (s.gradients_bytes / params, s.optimizer_bytes / params)
    assert per_param[0] == pytest.approx((4.0, 1.5), rel=1e-12)
    assert per_param[1] == pytest.approx((2.0, 1.5), rel=1e-12)


def test_zero0_optimizer_step_by_hand():
    """The same run's optimizer step at zero 0: 54 B of HBM traffic (the default optimizer_step_bytes) for
    each of its P/8 partition's parameters, plus the norm's read and clear_hp_grads' zeroing of the other
    7/8 of the whole fp32 gradient (4 B each: BF16_Optimizer.step's get_grads_for_norm reads and its
    clear_hp_grads zeroes the unsharded gradient), at 3.35 TB/s · 0.85: P · (54/8 + (4 + 4) · 7/8) B;
    zero 1 with fp32 gradients (the same optimizer) alike, zero 1 with bf16 gradients (the ZeRO-1
    optimizer, its norm and zeroing over its partition) P/8 · 54 B."""
    e = estimate("gpt3-1.3b", H100, framework="deepspeed", zero=0, **PLAN)
    params = e.stages[0].weights_bytes / 2
    by_hand = params * (54.0 / 8 + 8.0 * 7 / 8) / (3.35e12 * 0.85)
    assert e.breakdown.optimizer_s == pytest.approx(by_hand, rel=1e-9)
    fp32 = estimate("gpt3-1.3b", H100, framework="deepspeed", zero=1, grad_dtype="fp32", **PLAN)
    assert fp32.breakdown.optimizer_s == pytest.approx(e.breakdown.optimizer_s, rel=1e-12)
    e1 = estimate("gpt3-1.3b", H100, framework="deepspeed", zero=1, **PLAN)
    assert e1.breakdown.optimizer_s == pytest.approx(params / 8 * 54.0 / (3.35e12 * 0.85), rel=1e-9)


@pytest.mark.parametrize(
    "extra",
    [bf16_optimizer_norm_extra_bytes, bf16_optimizer_clear_extra_bytes],
    ids=["norm", "clear"],
)
def test_unsharded_extra_bytes_by_hand(extra):
    """bf16_optimizer_norm_extra_bytes (the norm's read) and bf16_optimizer_clear_extra_bytes
    (clear_hp_grads' zeroing, a write): (P − owned) · 4 B each where the BF16_Optimizer runs (zero 0; zero 1
    with fp32 gradients), 0 at zero 1 with bf16 gradients, at zero 2 and on a stack that never runs it."""
    assert bf16_optimizer_clear_bytes() == 4.0
    stage = SimpleNamespace()
    inp = _inp(np.array([0, 1, 2]), True)
    inp.gradient_groups = {"dense": None}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bf16_sync, "stage_params", lambda s, name: 800.0)
        assert list(extra(inp, stage, 100.0)) == [2800.0, 2800.0, 0.0]
        no_zero1 = _inp(1, False)
        no_zero1.gradient_groups = {"dense": None}
        assert extra(no_zero1, stage, 100.0) == 0.0
        other = _inp(0, True, stack_runs_it=False)
        assert extra(other, stage, 100.0) == 0.0


def test_fallback_copy_bytes_by_hand():
    """deepspeed_allreduce_copy_bytes: the average's read and write of c; a cast there and back where c ≠ k
    (k + c, c + k); flatten and copy back of several tensors (k + k twice)."""
    assert deepspeed_allreduce_copy_bytes(4.0, 4.0, True) == 8.0  # BF16_Optimizer, reduced in fp32
    assert deepspeed_allreduce_copy_bytes(4.0, 2.0, True) == 16.0  # ... in bf16: 4 + (6 + 6)
    assert deepspeed_allreduce_copy_bytes(2.0, 2.0, False) == 12.0  # fp16 param.grad: 4 + 8
    flat = np.array([True, False])
    assert deepspeed_allreduce_copy_bytes(4.0, 2.0, flat).tolist() == [16.0, 32.0]


def test_fallback_copies_by_hand(monkeypatch):
    """GPT-3 1.3B on 8 H100s, deepspeed profile, bf16, zero 0: the BF16_Optimizer's flat fp32 buffer, reduced
    in bf16 (communication_data_type), moves P · 16 B around its all-reduce at 3.35 TB/s · 0.85, wholly
    exposed (the fallback does not overlap); an fp16 run's per-parameter gradients P · 12 B; none under
    megatron-core."""
    for dtype, per_param in (("bf16", 16.0), ("fp16", 12.0)):
        plan = PLAN | {"dtype": dtype}
        e = estimate("gpt3-1.3b", H100, framework="deepspeed", zero=0, **plan)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(tail, "deepspeed_fallback_copies", lambda inp, s, t, p: (t, p))
            without = estimate("gpt3-1.3b", H100, framework="deepspeed", zero=0, **plan)
        params = e.stages[0].weights_bytes / 2
        by_hand = params * per_param / (3.35e12 * 0.85)
        assert e.breakdown.dp_comm_s - without.breakdown.dp_comm_s == pytest.approx(
            by_hand, rel=1e-9
        )
    megatron = estimate("gpt3-1.3b", H100, framework="megatron-core", zero=0, **PLAN)
    with pytest.MonkeyPatch.context() as mp:  # a stack without DeepSpeed's optimizers: no copies
        mp.setattr(tail, "deepspeed_fallback_copies", lambda inp, s, t, p: (t, p))
        same = estimate("gpt3-1.3b", H100, framework="megatron-core", zero=0, **PLAN)
    assert megatron.breakdown.dp_comm_s == same.breakdown.dp_comm_s > 0
