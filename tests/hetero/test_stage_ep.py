"""Expert parallelism in per-stage plans (issue 31): a stage of a mixture-of-experts model states ``ep`` and
``etp`` (specs.stage_plan.StageSpec), the plan the run's MoE knobs, checked by the uniform plan's MoE rules on
each stage (specs.rules_moe.stage_expert_violations: ep divides the experts, ep·etp the stage's tp·cp·dp; the
dispatcher against capacity; sequence parallelism with tp), one expert grid per model (stage_expert_rule),
one pool per MoE stage (stage_pools_rule) and the stack's parallel kinds, refused from the CLI in one line
with exit 2; priced as the uniform path prices it (tests/unit/test_one_path_moe.py) and kept by a round trip
plan -> JSON -> plan through ``paraplan estimate --plan``. The per-stage searches take MoE models:
tests/hetero/test_stage_moe_search.py."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from paraplan.catalog import load_model, load_system
from paraplan.cost.comm import GroupSpan
from paraplan.specs.cluster import uniform_cluster
from paraplan.specs.parallel import ParallelDims
from paraplan.specs.rules_moe import stage_expert_rule, stage_pools_rule
from paraplan.step.build import gradient_group
from paraplan.step.stage_blocks import attached_blocks, block_prefix_counts, distinct_blocks
from paraplan.step.stage_links import StageSetting, stage_gradient_groups
from tests.cli.test_engine_recipe_rules_cli import one_line_error
from tests.hetero.test_stage_cp import round_trips

SYSTEM = "dgx-h100-80gb"
OPTIONS = ["--model", "mixtral-8x7b", "--system", SYSTEM]


def stage(gpus: int = 16, **fields) -> dict:
    return {"pool": SYSTEM, "gpus": gpus, "layers": 16, "tp": 2, "ep": 8} | fields


def plan_file(tmp_path, stages, **fields) -> str:
    data = {"global_batch": 32, "seq_length": 4096, "microbatches": 4, "stages": stages}
    data |= {"sequence_parallel": True} | fields
    path = tmp_path / "stages.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize(
    "stages, fields, options, named",
    [
        # stages of different ep: one expert grid per model (Megatron-Core's one expert_model_parallel_size)
        (
            [stage(), stage(ep=4)],
            {},
            [],
            "plan.stages.1.ep: 4 is not allowed; every stage runs one ep and etp",
        ),
        # ep divides Mixtral's 8 experts
        (
            [stage(ep=16), stage(ep=16)],
            {},
            [],
            "plan.stages.0.ep: 16 is not allowed; must divide experts=8",
        ),
        # ep·etp divides the stage's tp·cp·dp: 8·4 on 16 GPUs
        (
            [stage(etp=4), stage(etp=4)],
            {},
            [],
            "plan.stages.0.ep: 8 is not allowed; ep·etp = 8·4 must divide tp·cp·dp = 2·1·8",
        ),
        # MoE layers with tp > 1 need sequence parallelism (Megatron-Core)
        (
            [stage(), stage()],
            {"sequence_parallel": False},
            [],
            "plan.sequence_parallel: False is not allowed; stage 0: MoE layers with tp=2 need",
        ),
        # the deepep dispatcher pads no expert to capacity
        (
            [stage(), stage()],
            {"moe_dispatcher": "deepep", "capacity_factor": 1.0},
            [],
            "plan.capacity_factor: 1.0 is not allowed; the deepep dispatcher cannot pad",
        ),
        # an MoE stage keeps its GPUs in one pool (its expert groups' spans are one system's)
        (
            [
                {
                    "devices": [{"pool": SYSTEM, "gpus": 8}, {"pool": "h100-b", "gpus": 8}],
                    "layers": 16,
                    "tp": 2,
                    "ep": 8,
                },
                stage(),
            ],
            {},
            ["--cluster"],
            (
                "plan.stages.0.devices: 2 is not allowed; a stage of a mixture-of-experts model "
                "takes its GPUs from one pool"
            ),
        ),
        # a stack whose loop runs no expert parallelism (specs.rules_stack.stack_parallelism_rules)
        (
            [stage(), stage()],
            {},
            ["--framework", "megatron-lm-2021"],
            "plan.ep: 8 is not allowed; the stack's training loop runs no expert parallelism",
        ),
    ],
)
def test_ep_rules_refuse_in_one_line(cli, tmp_path, stages, fields, options, named):
    if options == ["--cluster"]:  # two pools of the same nodes
        cluster = {"pools": [{"name": SYSTEM, "system": SYSTEM, "nodes": 3}]}
        cluster["pools"].append({"name": "h100-b", "system": SYSTEM, "nodes": 1})
        (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
        options = ["--cluster", str(tmp_path / "cluster.yaml")]
        argv = ["--model", "mixtral-8x7b", *options]
    else:
        argv = [*OPTIONS, *options]
    line = one_line_error(cli("estimate", *argv, "--plan", plan_file(tmp_path, stages, **fields)))
    assert named in line, line


def test_a_dense_model_takes_ep_1(cli, tmp_path):
    dense = ["--model", "llama3-8b", "--system", SYSTEM]
    line = one_line_error(cli("estimate", *dense, "--plan", plan_file(tmp_path, [stage(ep=2)] * 2)))
    assert (
        "plan.stages.0.ep: 2 is not allowed; expert parallelism needs a mixture-of-experts" in line
    )


def test_plan_file_with_ep_round_trips_through_estimate_plan(cli, tmp_path):
    """uniform --ep 8 -> a plan file of the same stages -> estimate --plan: the same step time and memory as the
    uniform estimate, and the plan written back keeps ep on every stage and its MoE knobs."""
    flags = ["--gpus", "32", "--tp", "2", "--pp", "2", "--ep", "8", "--global-batch", "32"]
    flags += ["--micro-batch", "1", "--seq-length", "4096", "--sequence-parallel", "--zero", "1"]
    flags += ["--moe-dispatcher", "allgather"]
    fields = {"microbatches": None, "micro_batch": 1, "zero": 1, "moe_dispatcher": "allgather"}
    path = plan_file(tmp_path, [stage(), stage()], **fields)
    for data in round_trips(cli, OPTIONS, flags, path):
        assert [s["ep"] for s in data["stage_plan"]["stages"]] == [8, 8]
        assert data["stage_plan"]["moe_dispatcher"] == "allgather"
        assert [s["ep"] for s in data["stages"]] == [8, 8] and data["breakdown"]["ep_comm_s"] > 0


def test_stage_expert_rules_by_hand():
    assert stage_expert_rule(8, 1, (8, 1)) is None
    assert "allowed: ep=8, etp=1" in stage_expert_rule(4, 1, (8, 1))
    assert "allowed: ep=8, etp=2" in stage_expert_rule(8, 1, (8, 2))
    mixtral, llama = load_model("mixtral-8x7b"), load_model("llama3-8b")
    assert stage_pools_rule(mixtral, 1) is None and stage_pools_rule(llama, 2) is None
    assert "one pool" in stage_pools_rule(mixtral, 2)


def test_expert_gradient_group_by_hand():
    """tp 2 · dp 8 = 16 GPUs, ep 4: the expert-data-parallel group holds 16/4 = 4 ranks, 4 apart, 2 per
    8-GPU node (cost.moe.expert_dp_span), priced by step.build.gradient_group on the pool's system; the dense
    group its 8 TP-rank-0 GPUs."""
    model, system = load_model("mixtral-8x7b"), load_system(SYSTEM)
    cluster = uniform_cluster(system, 32)
    pool = cluster.pools[0].name
    dims = ParallelDims(tp=2, dp=8, pp=2, ep=4)
    setting = StageSetting(((pool, 16, 16),), dims, 1, "none", (), 1, 4)
    groups = stage_gradient_groups(model, cluster, setting)
    assert set(groups) == {"dense", "expert"}
    assert groups["expert"] == gradient_group(system, GroupSpan(4, 2, 2))
    assert groups["dense"].size == 8 and groups["expert"].size == 4


def test_attached_blocks_by_hand():
    """DeepSeek-V3 (3 dense layers, 58 MoE layers, one MTP module): blocks [0, 63) = embedding, 61 layers,
    head. A stage holding blocks [0, 10) (embedding, layers 0-8: 3 dense, 6 MoE) holds 6 routed-expert
    blocks; one holding [50, 63) (layers 49-60 and the head) 12 MoE layers' experts and the MTP module's,
    and the MTP module."""
    model = load_model("deepseek-v3")
    (experts, hosts), (mtp, mtp_hosts) = attached_blocks(model)
    assert (experts.kind, hosts) == ("experts", {"moe_layer": 1, "head": 1})
    assert (mtp.kind, mtp_hosts) == ("mtp", {"head": 1})
    prefix = block_prefix_counts(model)
    kinds = [ref.kind for ref in distinct_blocks(model)]
    assert kinds == ["embedding", "dense_layer", "moe_layer", "head", "experts", "mtp"]
    count = {k: prefix[d] for d, k in enumerate(kinds)}
    assert count["dense_layer"][10] == 3 and count["moe_layer"][10] == 6
    assert count["experts"][10] == 6 and count["mtp"][10] == 0
    assert count["experts"][63] - count["experts"][50] == 12 + 1
    assert count["mtp"][63] - count["mtp"][50] == 1
    assert np.all(block_prefix_counts(load_model("llama3-8b"))[:, -1] == [1, 32, 1])
