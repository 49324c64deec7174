"""Offload on per-stage plans (issue 31): the four offload fields a uniform plan states, checked per pool
(specs.rules_offload.pool_offload_violations), priced on the uniform path's terms (step.per_stage: the
optimizer-offload flag through step.constants.at_zero_stage, each stage's host link and host memory the least
of its pools'), and carried by a restated uniform plan (specs.uniform_stages.uniform_stage_plan) through
``estimate --plan``."""

from __future__ import annotations

import json

import pytest
from tests.hetero.test_hetero_estimate import MIXED, SMALL

from paraplan.catalog import load_model, load_system
from paraplan.specs.cluster import ClusterSpec, PoolSpec
from paraplan.specs.errors import InputError
from paraplan.specs.plan import PlanSpec
from paraplan.specs.stage_plan import stage_plan_from_dict
from paraplan.specs.uniform_stages import uniform_stage_plan
from paraplan.step.estimate import estimate
from paraplan.step.per_stage import estimate_stage_plan

GIB = 2**30


def _plan(stages, **kw):
    base = {"global_batch": 8, "seq_length": 1024, "microbatches": 4, "dtype": "fp16"}
    return stage_plan_from_dict(base | {"attention": "unfused", "stages": stages} | kw)


def test_a_stage_over_two_pools_takes_the_least_host_memory():
    """A stage of 2 V100s (aws-p3.8xlarge: 61 GiB of host memory per GPU) and 2 T4s (aws-g4dn.12xlarge:
    48 GiB) holds its offloaded state against 48 GiB; a stage on V100s alone against 61 GiB."""
    devices = [{"pool": "v100", "gpus": 2}, {"pool": "t4", "gpus": 2}]
    plan = _plan(
        [{"pool": "v100", "gpus": 2, "layers": 4}, {"devices": devices, "layers": 4, "tp": 2}],
        offload_optimizer=True,
        global_batch=16,
    )
    est = estimate_stage_plan(SMALL, MIXED, plan)
    assert [s.host_capacity_bytes for s in est.stages] == [61 * GIB, 48 * GIB]
    assert all(s.host_bytes > 0 for s in est.stages)


def _two_pool_cluster(slow_Bps: float) -> ClusterSpec:
    """Two 8-GPU DGX A100 pools, the second's host link at ``slow_Bps``."""
    system = load_system("dgx-a100-80gb")
    acc = system.accelerator.model_copy(update={"host_bandwidth": slow_Bps})
    slow = system.model_copy(update={"accelerator": acc, "name": "slow-host"})
    return ClusterSpec(pools=(PoolSpec(name="a", system=system), PoolSpec(name="b", system=slow)))


def test_a_stage_over_two_pools_streams_at_the_slower_host_link():
    """Optimizer offload moves each step's gradients out and weights back over the host link (step.tail):
    a one-stage plan of 1 GPU from each pool (dp 2) prices it at the slower pool's link, so halving that
    link doubles the offload part exactly, and a stage on the fast pool alone keeps the fast rate."""
    fast = load_system("dgx-a100-80gb").accelerator.host_bandwidth
    devices = [{"pool": "a", "gpus": 1}, {"pool": "b", "gpus": 1}]
    stages = [{"devices": devices, "layers": 8}]
    kw = {"dtype": "bf16", "attention": "flash", "offload_optimizer": True}
    half = estimate_stage_plan(SMALL, _two_pool_cluster(fast / 2), _plan(stages, **kw))
    quarter = estimate_stage_plan(SMALL, _two_pool_cluster(fast / 4), _plan(stages, **kw))
    assert half.breakdown.offload_s > 0
    assert quarter.breakdown.offload_s == pytest.approx(2 * half.breakdown.offload_s, rel=1e-12)
    alone = [{"devices": [{"pool": "a", "gpus": 2}], "layers": 8}]
    fast_only = estimate_stage_plan(SMALL, _two_pool_cluster(fast / 4), _plan(alone, **kw))
    assert fast_only.breakdown.offload_s == pytest.approx(half.breakdown.offload_s / 2, rel=1e-12)


def test_each_pool_must_declare_its_host():
    """specs.rules_offload.offload_rule per pool: a pool whose system declares no host memory refuses the
    plan's offload, named once; the plan without offload runs."""
    system = load_system("aws-p3.8xlarge")
    acc = system.accelerator.model_copy(update={"host_memory": None})
    bare = system.model_copy(update={"accelerator": acc, "name": "bare"})
    cluster = ClusterSpec(
        pools=(PoolSpec(name="v100", system=system), PoolSpec(name="t4", system=bare))
    )
    stages = [{"pool": "v100", "gpus": 4, "layers": 4}, {"pool": "t4", "gpus": 4, "layers": 4}]
    with pytest.raises(InputError) as err:
        estimate_stage_plan(SMALL, cluster, _plan(stages, offload_weights=True, global_batch=16))
    assert str(err.value).count("system bare declares no host_memory") == 1
    assert "plan.offload" in str(err.value)
    assert estimate_stage_plan(SMALL, cluster, _plan(stages, global_batch=16)).step_time_s > 0


def test_activation_layers_need_activation_offload():
    """The uniform plan's rule (specs.rules_offload.offload_layers_rule), in its words."""
    stages = [{"pool": "v100", "gpus": 4, "layers": 8}]
    with pytest.raises(InputError, match="offload_activation_layers=2 needs offload_activations"):
        _plan(stages, offload_activation_layers=2)
    with pytest.raises(Exception, match="offload_activation_layers=2 needs offload_activations"):
        PlanSpec(gpus=8, global_batch=8, seq_length=1024, offload_activation_layers=2)


def test_an_offloading_uniform_plan_round_trips_through_estimate_plan(cli, tmp_path):
    """gpt3-1.3b, pp 4 tp 2 interleaved, weights, 1 layer's activations and the optimizer offloaded on 16
    H100s: the uniform plan restated stage by stage (uniform_stage_plan, written as a file) and read back by
    ``estimate --plan`` gives the uniform estimate's step time and offload part."""
    degrees = {"gpus": 16, "tp": 2, "pp": 4, "vpp": 2, "schedule": "interleaved"}
    batch = {"global_batch": 16, "micro_batch": 1, "seq_length": 2048}
    offloads = {"offload_weights": True, "offload_activations": True, "offload_optimizer": True}
    plan = PlanSpec(**degrees, **batch, **offloads, offload_activation_layers=1)
    model, system = load_model("gpt3-1.3b"), load_system("dgx-h100-80gb")
    staged = uniform_stage_plan(plan, model, "dgx-h100-80gb")
    path = tmp_path / "stages.json"
    path.write_text(json.dumps(staged.model_dump(mode="json", exclude_none=True)))
    code, out, err = cli(
        "estimate", "-m", "gpt3-1.3b", "-s", "dgx-h100-80gb", "--plan", str(path), "--json"
    )
    assert code == 0, err
    per_stage, uniform = json.loads(out), estimate(model, system, plan)
    assert per_stage["plan"]["offload_activation_layers"] == 1
    assert per_stage["step_time_s"] == pytest.approx(uniform.step_time_s, rel=1e-9)
    assert uniform.breakdown.offload_s > 0
    assert per_stage["breakdown"]["offload_s"] == pytest.approx(
        uniform.breakdown.offload_s, rel=1e-9
    )
