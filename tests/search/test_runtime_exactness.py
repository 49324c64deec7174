"""The fast search stays exact under the runtime costs of a framework profile (cost.runtimes): the
interleaved schedule's overlapped p2p (nemo-24.09: the row bound drops its one exchange), DeepSpeed's
separate transfers and per-micro-batch accumulation (megatron-deepspeed), FSDP2's copies (torchtitan);
one-candidate chunks so that the bounds decide what is skipped."""

from __future__ import annotations

import math

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.frameworks import framework_search_fields, framework_system
from paraplan.search import row_scan
from paraplan.search.exhaustive import exhaustive_search
from paraplan.search.run import search
from paraplan.search.space import SearchProblem


def _check(name: str, monkeypatch, runtime: dict | None = None, vary_offload: bool = False):
    """The fast and the exhaustive search of gpt3-1.3b on 32 H100s under profile ``name`` (its run-wide
    knobs updated by ``runtime``), bit for bit; the fast search's result."""
    fw = load_framework(name)
    axes = {"micro_batch": (1, 2), "recompute": ("none",)}
    fields = framework_search_fields(fw)
    fields["runtime"] = fields["runtime"].model_copy(update=runtime or {})
    problem = SearchProblem(
        model=load_model("gpt3-1.3b"),
        system=framework_system(fw, load_system("dgx-h100-80gb")),
        **{"gpus": 32, "global_batch": 64, "seq_length": 2048, **axes},
        **{"vary_placement": False, "vary_offload": vary_offload, **fields},
    )
    monkeypatch.setattr(row_scan, "CHUNK_CANDIDATES", 1)
    fast, ref = search(problem, top_k=10), exhaustive_search(problem, top_k=10)
    assert fast.evaluated < fast.candidates  # the bounds pruned
    assert [p.key for p in fast.plans] == [p.key for p in ref.plans]
    for a, b in zip(fast.plans, ref.plans):
        assert math.isclose(a.estimate.step_time_s, b.estimate.step_time_s, rel_tol=1e-9)
    return fast


@pytest.mark.slow
def test_search_exact_with_overlapped_p2p(monkeypatch):
    fast = _check("nemo-24.09", monkeypatch)
    assert any(p.plan.vpp > 1 for p in fast.plans)  # interleaved plans, whose p2p overlaps, rank


@pytest.mark.slow
@pytest.mark.parametrize("name", ["megatron-deepspeed", "torchtitan"])
def test_search_exact_with_runtime_copies(name, monkeypatch):
    _check(name, monkeypatch)


@pytest.mark.slow
def test_search_exact_where_zero_0_runs_another_optimizer(monkeypatch):
    """DeepSpeed's bf16 runs (the deepspeed profile: zero0_bf16_optimizer) take the BF16_Optimizer's fp32
    gradients and per-micro-batch accumulation pass at ZeRO 0 only (step.constants.at_zero_stage), so the
    candidates of one bound group differ in a term the pipeline half reads: the group's bound takes the
    lesser of each (step.compose.pipeline_bound_s). A group whose first option was ZeRO 0 once bounded its
    ZeRO-1 plans above their step time, and the fast search lost a zero-1 tp 2 plan (review, session 20)."""
    fw = load_framework("deepspeed")
    problem = SearchProblem(
        model=load_model("gpt3-6.7b"),
        system=framework_system(fw, load_system("dgx-h100-80gb")),
        **{"gpus": 8, "global_batch": 64, "seq_length": 2048},
        **{"micro_batch": (1, 2, 4), "recompute": ("none", "full")},
        **{"vary_placement": False, "vary_offload": False, **framework_search_fields(fw)},
    )
    monkeypatch.setattr(row_scan, "CHUNK_CANDIDATES", 1)
    fast, ref = search(problem, top_k=40), exhaustive_search(problem, top_k=40)
    assert [p.key for p in fast.plans] == [p.key for p in ref.plans]
    for a, b in zip(fast.plans, ref.plans):
        assert math.isclose(a.estimate.step_time_s, b.estimate.step_time_s, rel_tol=1e-9)


@pytest.mark.slow
def test_search_exact_where_zero_1_runs_the_bf16_optimizer(monkeypatch):
    """``--grad-dtype fp32`` under the deepspeed profile: ZeRO 1 without optimizer offload runs the
    BF16_Optimizer too (specs.rules_stack.runs_bf16_optimizer), so a bound group's ZeRO-1 candidates
    differ in the accumulation pass by their offload choice; the fast search still returns the
    exhaustive ranking, zero-1 plans on the GPU among it (as a plan or as the equivalent of a zero-0 one:
    the BF16_Optimizer shards its state at zero 0 as at zero 1, step.bf16_optimizer_sync.optimizer_shard_ways,
    so the two price alike)."""
    fast = _check("deepspeed", monkeypatch, {"grad_dtype": "fp32"}, vary_offload=True)
    plans = [q for p in fast.plans for q in (p.plan, *p.equivalents)]
    assert any(q.zero == 1 and not q.offload_optimizer for q in plans)
