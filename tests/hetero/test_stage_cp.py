"""Context parallelism in per-stage plans (issue 31): a stage states ``cp`` (specs.stage_plan.StageSpec), checked
by the uniform plan's cp rules (specs.rules.stage_rules: cp_rule, ulysses_rule; stage_cp_rule: one cp per model,
none on an encoder-decoder; pool_slice_rule; the stack's parallel kinds), refused from the CLI in one line with
exit 2, priced as the uniform path prices it (tests/unit/test_one_path.py draws cp in {1, 2, 4}), and kept by a
round trip plan -> JSON -> plan through ``paraplan estimate --plan``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from paraplan.catalog import load_model, load_system
from paraplan.cost.comm import GroupSpan
from paraplan.specs.cluster import uniform_cluster
from paraplan.specs.stage_plan import stage_plan_from_dict
from paraplan.step.per_stage import estimate_stage_plan
from paraplan.step.stage_links import cp_reshard_peers, cp_span, p2p_links
from tests.cli.test_engine_recipe_rules_cli import one_line_error
from tests.unit.test_one_path import assert_same, both_paths

SYSTEM = "dgx-h100-80gb"
OPTIONS = ["--model", "llama3-8b", "--system", SYSTEM]
REL = 1e-9


def stage(gpus: int = 8, **fields) -> dict:
    return {"pool": SYSTEM, "gpus": gpus, "layers": 16, "tp": 2} | fields


def plan_file(tmp_path, stages, **fields) -> str:
    data = {"global_batch": 8, "seq_length": 8192, "microbatches": 4, "stages": stages} | fields
    path = tmp_path / "stages.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize(
    "stages, fields, options, named",
    [
        # stages of different cp: one context-parallel group size per model
        (
            [stage(cp=2), stage(cp=1, dp=4)],
            {"global_batch": 16},
            [],
            "plan.stages.1.cp: 1 is not allowed; every stage runs one cp",
        ),
        # cp splits the sequence into 2·cp chunks (specs.rules.cp_rule)
        (
            [stage(cp=4, dp=1), stage(cp=4, dp=1)],
            {"seq_length": 8196},
            [],
            "plan.seq_length: 8196 is not allowed; stage 0: must be divisible by 2·cp = 8",
        ),
        # Ulysses: tp·cp divides heads and kv_heads (specs.rules.ulysses_rule)
        (
            [stage(16, cp=8), stage(16, cp=8)],
            {"cp_algorithm": "all-to-all"},
            [],
            "plan.stages.0.cp: 8 is not allowed; cp_algorithm='all-to-all' needs tp·cp = 16",
        ),
        # a pool's slice holds whole TP and CP groups (specs.rules.pool_slice_rule)
        (
            [
                {
                    "devices": [{"pool": SYSTEM, "gpus": 2}, {"pool": SYSTEM, "gpus": 6}],
                    "layers": 16,
                    "tp": 2,
                    "cp": 2,
                },
                stage(cp=2),
            ],
            {},
            [],
            "plan.stages.0.devices.0.gpus: 2 is not allowed; must be a multiple of tp·cp=4",
        ),
        # sequence parallelism splits each rank's s/cp tokens over tp
        (
            [stage(tp=4, cp=2, dp=1), stage(tp=4, cp=2, dp=1)],
            {"seq_length": 8196, "sequence_parallel": True},
            [],
            "plan.seq_length: 8196 is not allowed; stage 0: seq_length/cp must be divisible by tp=4",
        ),
        # the stack's loop runs no context parallelism (specs.rules_stack.stack_parallelism_rules)
        (
            [stage(cp=2), stage(cp=2)],
            {},
            ["--framework", "deepspeed-2021"],
            "plan.cp: 2 is not allowed; the stack's training loop runs no context parallelism",
        ),
    ],
)
def test_cp_rules_refuse_in_one_line(cli, tmp_path, stages, fields, options, named):
    line = one_line_error(
        cli("estimate", *OPTIONS, *options, "--plan", plan_file(tmp_path, stages, **fields))
    )
    assert named in line, line


def test_tp_cp_must_divide_the_stage_gpus(cli, tmp_path):
    line = one_line_error(
        cli("estimate", *OPTIONS, "--plan", plan_file(tmp_path, [stage(6, cp=2), stage(cp=2)]))
    )
    assert "plan.stages.0: tp·cp=2·2 must divide the stage's GPUs = 6" in line, line


def test_an_encoder_decoder_takes_cp_1(cli, tmp_path):
    """Its cross-attention (graph.encoder.cross_attention_ops) has no CP exchange: refused on a per-stage
    plan (plan.stages.i.cp) and on the uniform options the CLI restates stage by stage (plan.cp)."""
    t5 = ["--model", "t5-3b", "--system", SYSTEM]
    stages = [stage(cp=2, layers=24), stage(cp=2, layers=24)]
    path = plan_file(tmp_path, stages, seq_length=1024)
    line = one_line_error(cli("estimate", *t5, "--plan", path))
    assert "plan.stages.0.cp: 2 is not allowed; an encoder-decoder" in line, line
    uniform = ["--gpus", "16", "--tp", "2", "--cp", "2", "--pp", "2", "--global-batch", "8"]
    line = one_line_error(cli("estimate", *t5, *uniform))
    assert "plan.cp: 2 is not allowed; an encoder-decoder" in line and "allowed: 1" in line


def round_trips(cli, options: list[str], uniform_flags: list[str], path: str):
    """The uniform estimate of ``uniform_flags``, then ``estimate --plan path`` twice (the plan, then the plan the
    first estimate wrote back), each with the uniform estimate's step time and per-stage peaks: yields each
    JSON result."""
    code, out, err = cli("estimate", *options, *uniform_flags, "--json")
    assert code == 0, err
    uniform = json.loads(out)
    for _ in range(2):
        code, out, err = cli("estimate", *options, "--plan", path, "--json")
        assert code == 0, err
        data = json.loads(out)
        assert data["step_time_s"] == pytest.approx(uniform["step_time_s"], rel=REL)
        for u, p in zip(uniform["memory"]["per_stage"], data["stages"]):
            assert p["peak_gib"] == pytest.approx(u["peak_gib"], rel=REL)
        yield data
        Path(path).write_text(yaml.safe_dump(data["stage_plan"]))


def test_plan_file_with_cp_round_trips_through_estimate_plan(cli, tmp_path):
    """uniform --cp 2 -> its per-stage plan (JSON, stage_plan) -> a plan file -> estimate --plan: the same step
    time and memory as the uniform estimate, and the plan written back keeps cp on every stage."""
    flags = ["--gpus", "32", "--tp", "2", "--cp", "2", "--pp", "2", "--global-batch", "16"]
    flags += ["--micro-batch", "1", "--seq-length", "8192", "--zero", "1"]
    stages = [stage(16, cp=2), stage(16, cp=2)]
    path = plan_file(tmp_path, stages, global_batch=16, microbatches=None, micro_batch=1, zero=1)
    for data in round_trips(cli, OPTIONS, flags, path):
        assert [s["cp"] for s in data["stage_plan"]["stages"]] == [2, 2]
        assert [s["cp"] for s in data["stages"]] == [2, 2] and data["breakdown"]["cp_comm_s"] > 0
        assert stage_plan_from_dict(data["stage_plan"]).stages[1].cp == 2


def test_cp_span_by_hand():
    """cp ranks tp apart (order tp-cp-dp) on 8-GPU nodes: tp 4 · cp 4 puts ranks 0, 4 | 8, 12 on two nodes;
    tp 2 · cp 2 on one; tp 1 · cp 4 from GPU 8 on the second node alone; cp 1 no group."""
    cluster = uniform_cluster(load_system(SYSTEM), 32)
    pool = cluster.pools[0].name
    assert cp_span(cluster, ((pool, 0, 16),), 4, 4, pool) == GroupSpan(4, 2, 2)
    assert cp_span(cluster, ((pool, 0, 8),), 2, 2, pool) == GroupSpan(2, 2, 1)
    assert cp_span(cluster, ((pool, 8, 8),), 1, 4, pool) == GroupSpan(4, 4, 1)
    assert cp_span(cluster, ((pool, 0, 8),), 2, 1, pool) == GroupSpan(1, 1, 1)


def test_cp_ranks_reshard_between_stages_of_different_dp():
    """Rank r = replica·cp + c: CP rank c of each replica exchanges with CP rank c of the replicas whose
    samples overlap (dp 2 -> 1 with cp 2: ranks 0 and 2 send to 0, ranks 1 and 3 to 1; back: 0 to 0 and 2)."""
    assert cp_reshard_peers(4, 2, 2) == ((0,), (1,), (0,), (1,))
    assert cp_reshard_peers(2, 4, 2) == ((0, 2), (1, 3))
    cluster = uniform_cluster(load_system(SYSTEM), 16)
    pool = cluster.pools[0].name
    links = p2p_links(cluster, ((pool, 0, 8),), 2, ((pool, 8, 8),), 4, False, 2)
    assert [len(peers) for peers in links] == [1, 1, 1, 1]


def test_stages_of_different_dp_with_cp_are_priced():
    """tp 2 · cp 2 · dp 2 then tp 4 · cp 2 · dp 1 (the same cp): the plan is priced, its point-to-point
    counted, its context-parallel ring on both stages."""
    model, system = load_model("llama3-8b"), load_system(SYSTEM)
    plan = stage_plan_from_dict(
        {
            "global_batch": 8,
            "seq_length": 8192,
            "microbatches": 4,
            "stages": [stage(cp=2), stage(cp=2, tp=4)],
        }
    )
    est = estimate_stage_plan(model, uniform_cluster(system, 16), plan)
    assert est.breakdown.pp_comm_s > 0 and est.breakdown.cp_comm_s > 0
    assert [(s["tp"], s["cp"], s["dp"]) for s in est.stage_summary] == [(2, 2, 2), (4, 2, 1)]


@pytest.mark.parametrize("tp, cp", [(1, 2), (2, 2), (1, 4), (2, 4)])
def test_ulysses_stages_price_as_the_uniform_plan(tp, cp):
    """cp_algorithm all-to-all (DeepSpeed-Ulysses) carried to the per-stage plan's layer shape."""
    plan = dict(gpus=tp * cp * 2 * 2, tp=tp, cp=cp, pp=2, global_batch=8, micro_batch=1)
    uniform, per_stage = both_paths(
        "llama3-8b", seq_length=8192, cp_algorithm="all-to-all", zero=1, **plan
    )
    assert_same(uniform, per_stage)
    assert uniform.breakdown.cp_comm_s > 0
