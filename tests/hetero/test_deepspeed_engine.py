"""DeepSpeed PipelineEngine rules (step/engines.py) and the AMP-trial figures they give."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_system
from paraplan.specs.rules_stack import engine_dp_overlap_rule
from paraplan.step.engines import (
    ENGINE_STACKS,
    ENGINES,
    attention_mask_bytes,
    backward_transfer_bytes,
    engine_rules_of,
    forward_transfer_bytes,
    grad_accumulation_first_saving_bytes,
    host_layer_times_s,
)
from paraplan.validate.hetero import load_hetero_cases, run_hetero_cases

ACT = 2.0 * 1024 * 1024  # b·s·h fp16 bytes of one GPT-2-medium micro-batch (b 1, s 1024, h 1024)


def test_transfer_bytes_by_hand():
    ds, mg = engine_rules_of("deepspeed", "amp2022"), ENGINES["megatron"]
    # DeepSpeed on AMP's stack, tp 2: half the activation (partitioned) + the fp16 [1,1,s,s] mask
    # forward; whole gradient back
    assert attention_mask_bytes(1024) == 2 * 1024 * 1024
    assert forward_transfer_bytes(ds, ACT, 2, 1024) == ACT / 2 + 2 * 1024**2
    assert backward_transfer_bytes(ds, ACT, 2) == ACT
    # Megatron: 1/t both ways, no mask
    assert (
        forward_transfer_bytes(mg, ACT, 2, 1024) == backward_transfer_bytes(mg, ACT, 2) == ACT / 2
    )
    assert host_layer_times_s(ds) == (ds.host_layer_forward_s, 2 * ds.host_layer_forward_s)
    assert host_layer_times_s(mg) == (0.0, 0.0)


def test_the_engine_alone_carries_no_constant_of_amps_stack():
    """DeepSpeed's PipelineEngine without a stated stack (a per-stage plan under a DeepSpeed
    profile): its own rules (two blocking transfers, the activation split over TP and gathered, no
    DP overlap, its batch syncs) and the stack's for the rest (its gradient accumulation among them); AMP's stack
    (engine_stack amp2022) adds its fp16 mask, host time, activation factor, synchronous TP backward,
    fp16 gradient bytes and fp16 param.grad accumulation, and nothing else."""
    ds, amp = ENGINES["deepspeed"], engine_rules_of("deepspeed", "amp2022")
    assert forward_transfer_bytes(ds, ACT, 2, 1024) == ACT / 2
    assert host_layer_times_s(ds) == (0.0, 0.0)
    assert (ds.activation_memory_factor, ds.gradient_bytes, ds.tied_grad_bytes) == (1.0, 0.0, 0.0)
    assert ds.async_tp_backward and not ds.sends_attention_mask
    assert (ds.transfers_per_neighbour, ds.batch_syncs) == (2, 1.0)
    # no DP overlap with pp > 1: the plan's switch, refused there (specs.rules_stack.engine_dp_overlap_rule)
    assert engine_dp_overlap_rule("deepspeed", True, 2) and not engine_dp_overlap_rule(
        "deepspeed", False, 2
    )
    # the engine's accumulation is the stack's (step.constants.at_zero_stage, as on a uniform plan);
    # AMP's stack states its FP16 optimizer's fp16 param.grad
    assert (ds.grad_accumulation, amp.grad_accumulation) == ("fused", "fp16_param_grad")
    assert (ds.grads_none_after_step, amp.grads_none_after_step) == (False, True)
    assert (amp.host_layer_forward_s, amp.activation_memory_factor) == (1.0e-3, 1.5)
    assert (amp.gradient_bytes, amp.tied_grad_bytes, amp.async_tp_backward) == (6.0, 2.0, False)
    differ = {f for f in ds.__dataclass_fields__ if getattr(ds, f) != getattr(amp, f)}
    assert differ == set(ENGINE_STACKS["amp2022"])
    assert engine_rules_of("deepspeed") is ds


def test_amps_first_micro_batch_takes_its_gradient_by_hand():
    """AMP's FP16 optimizer sets the fp16 param.grad to None after each step (zero_grad(set_grads_to_None=True)),
    so a step of m micro-batches adds m − 1 times: het-054 (GPT-2 medium, P = 24·(12h² + 13h) + V·h + 1024·h + 2h
    = 356,870,144 parameters, h 1024, V 52256; 16 T4s, dp 16, pp 1, m = 2) saves one add of P·6 B at the T4's
    HBM rate (320 GB/s × 0.6) in its backward: 11.152 ms against the rules that add every micro-batch."""
    from dataclasses import replace

    from paraplan.step.per_stage import estimate_stage_plan

    amp = engine_rules_of("deepspeed", "amp2022")
    assert grad_accumulation_first_saving_bytes(amp) == 6.0
    assert grad_accumulation_first_saving_bytes(replace(amp, grads_none_after_step=False)) == 0.0
    assert (
        grad_accumulation_first_saving_bytes(ENGINES["deepspeed"]) == 0.0
    )  # the stack's, resolved
    case = next(c for c in load_hetero_cases() if c.name == "het-054")
    assert case.plan.microbatches == 2 and len(case.plan.stages) == 1
    params = 24 * (12 * 1024**2 + 13 * 1024) + 52256 * 1024 + 1024 * 1024 + 2 * 1024
    assert params == 356_870_144
    by_hand = params * 6.0 / (320e9 * 0.6)
    assert by_hand == pytest.approx(11.152e-3, rel=1e-4)
    saved = estimate_stage_plan(case.model, case.cluster, case.plan, amp)
    every = estimate_stage_plan(
        case.model, case.cluster, case.plan, replace(amp, grads_none_after_step=False)
    )
    assert every.breakdown.backward_s - saved.breakdown.backward_s == pytest.approx(
        by_hand, rel=1e-9
    )


def test_amp_trials_figures_and_failures():
    report = run_hetero_cases(load_hetero_cases())
    groups = report["summary"]["by_group"]
    assert groups["amp-t4"]["step_time_s_mape_pct"] < 10.0
    assert groups["amp-mixed"]["step_time_s_mape_pct"] < 13.0
    entries = {e["name"]: e for e in report["cases"]}
    # the four trials with a parameterless stage cannot run (problems), seven more are out of memory;
    # no timed trial is predicted not to run
    for name in ("het-011", "het-035", "het-046", "het-101"):
        assert (
            entries[name]["predicted"]["fits"] is False and entries[name]["predicted"]["problems"]
        )
    oom = {"het-023", "het-045", "het-051", "het-053", "het-055", "het-099", "het-105"}
    assert {n for n in oom if entries[n]["predicted"]["peak_fraction_of_capacity"] > 1.0} == oom
    assert all(e["predicted"]["fits"] for e in report["cases"] if "step_time_s" in e["measured"])


def test_reshard_peers_and_time_between_stages_of_different_dp():
    from paraplan.step.per_stage import StageSetting, p2p_time_s, reshard_peers
    from paraplan.specs.cluster import uniform_cluster
    from paraplan.specs.parallel import ParallelDims

    assert reshard_peers(2, 4) == ((0, 1), (2, 3))
    assert reshard_peers(4, 2) == ((0,), (0,), (1,), (1,))
    assert reshard_peers(3, 2) == ((0,), (0, 1), (1,))
    system = load_system("dgx-a100-80gb")
    cluster = uniform_cluster(system, 8)
    pool = cluster.pools[0].name
    a = StageSetting(
        ((pool, 0, 2),), ParallelDims(dp=2, pp=2), 2, "none", (), 0, 4
    )  # dp 2, 2 samples per GPU
    b = StageSetting(
        ((pool, 2, 4),), ParallelDims(dp=4, pp=2), 1, "none", (), 1, 4
    )  # dp 4, 1 sample per GPU
    rate, lat = (
        system.node.nvlink_bandwidth * system.node.nvlink_efficiency,
        system.node.nvlink_latency,
    )
    size = 8e6  # a sender's bytes: half to each of its two receivers, one after the other
    assert p2p_time_s(cluster, a, b, size) == pytest.approx(2 * (size / 2 / rate + lat))
    # a receiver has one peer and its own (half as large) bytes
    assert p2p_time_s(cluster, a, b, size / 2, receiver=True) == pytest.approx(
        size / 2 / rate + lat
    )
