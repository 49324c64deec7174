"""Cluster, non-uniform plan and model-architecture inputs: validation, round trips, one-line errors."""

from __future__ import annotations

import json

import pytest
import yaml

from paraplan.catalog import load_system
from paraplan.catalog.clusters import cluster_from_dict, load_cluster, load_stage_plan
from paraplan.specs.cluster import ClusterSpec, uniform_cluster
from paraplan.specs.errors import InputError
from paraplan.specs.model import ModelSpec
from paraplan.specs.stage_plan import (
    check_stage_plan,
    is_stage_plan,
    stage_block_ranges,
    stage_devices,
    stage_plan_from_dict,
    stage_plan_to_dict,
)

AMP_CLUSTER = {
    "name": "amp-mixed",
    "pools": [
        {"name": "v100", "system": "aws-p3.8xlarge", "nodes": 3},
        {"name": "t4", "system": "aws-g4dn.12xlarge", "nodes": 1},
    ],
}
GPT2 = ModelSpec(layers=24, hidden=1024, heads=16, ffn_hidden=4096, vocab=52256)


def test_cluster_counts_and_links():
    c = cluster_from_dict(AMP_CLUSTER)
    assert c.gpus == 16 and not c.is_uniform and c.pool_offset("t4") == 12
    # default link between pools: the slower network (p3.8xlarge 10 Gb/s / 4 GPUs at 90 %)
    bw, lat = c.link_rate("v100", "t4")
    assert bw == pytest.approx(1.25e9 / 4 * 0.9) and lat == pytest.approx(30e-6)
    linked = cluster_from_dict(
        AMP_CLUSTER
        | {
            "links": [
                {
                    "pools": ["t4", "v100"],
                    "bandwidth": "2 GB/s",
                    "latency": "50 us",
                    "efficiency": 0.5,
                }
            ]
        }
    )
    assert linked.link_rate("v100", "t4") == (pytest.approx(1e9), pytest.approx(50e-6))


def test_uniform_cluster_is_one_pool():
    c = uniform_cluster(load_system("dgx-a100-80gb"), 12)
    assert c.is_uniform and c.gpus == 12 and c.pools[0].nodes == 2


@pytest.mark.parametrize(
    "change, message",
    [
        ({"pools": []}, "cluster.pools"),
        (
            {
                "pools": [
                    {"name": "a", "system": "aws-p3.8xlarge"},
                    {"name": "a", "system": "aws-p3.8xlarge"},
                ]
            },
            "used twice",
        ),
        ({"links": [{"pools": ["v100", "nope"], "bandwidth": "1 GB/s"}]}, "'nope'"),
        ({"links": [{"pools": ["v100", "v100"], "bandwidth": "1 GB/s"}]}, "itself"),
        ({"pools": [{"name": "a", "system": "aws-p3.8xlarg"}]}, "did you mean"),
        ({"pools": [{"name": "a", "system": "aws-p3.8xlarge", "nodes": 1, "gpus": 5}]}, "exceeds"),
    ],
)
def test_cluster_errors_are_one_line(change, message):
    with pytest.raises(InputError) as err:
        cluster_from_dict(AMP_CLUSTER | change)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_cluster_file(tmp_path):
    import yaml

    path = tmp_path / "mixed.yaml"
    path.write_text(yaml.safe_dump(AMP_CLUSTER))
    assert load_cluster(path).gpus == 16
    assert isinstance(load_cluster(load_cluster(str(path))), ClusterSpec)


PLAN = {
    "global_batch": 32,
    "seq_length": 1024,
    "microbatches": 4,
    "dtype": "fp16",
    "attention": "unfused",
    "stages": [
        {"pool": "v100", "gpus": 8, "layers": 14, "tp": 2},
        {
            "devices": [{"pool": "v100", "gpus": 4}, {"pool": "t4", "gpus": 4}],
            "layers": 10,
            "tp": 1,
            "recompute": "full",
        },
    ],
}


def test_stage_plan_derived():
    plan = stage_plan_from_dict(PLAN)
    assert plan.pp == 2 and plan.gpus == 16 and plan.n_microbatches == 4
    assert [s.data_parallel for s in plan.stages] == [4, 8]
    assert plan.stage_micro_batch(0) == 2 and plan.stage_micro_batch(1) == 1  # 32 / (4·dp)
    assert stage_block_ranges(plan, 26) == [(0, 15), (15, 26)]
    assert stage_devices(plan, cluster_from_dict(AMP_CLUSTER)) == [
        [("v100", 0, 8)],
        [("v100", 8, 4), ("t4", 0, 4)],
    ]
    check_stage_plan(plan, GPT2, cluster_from_dict(AMP_CLUSTER))
    assert is_stage_plan(PLAN) and not is_stage_plan({"gpus": 8})


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_stage_plan_round_trip(tmp_path, suffix):
    plan = stage_plan_from_dict(PLAN)
    path = tmp_path / f"plan{suffix}"
    data = stage_plan_to_dict(plan)
    path.write_text(json.dumps(data) if suffix == ".json" else yaml.safe_dump(data))
    assert load_stage_plan(path) == plan
    assert stage_plan_to_dict(plan)["stages"][0] == {
        "pool": "v100",
        "gpus": 8,
        "layers": 14,
        "tp": 2,
    }


def _stage(i, **change):
    data = {**PLAN, "stages": [dict(s) for s in PLAN["stages"]]}
    data["stages"][i].update(change)
    return data


@pytest.mark.parametrize(
    "data, message",
    [
        (_stage(0, tp=3), "plan.stages.0"),
        (_stage(0, dp=3), "tp·dp"),
        (_stage(0, blocks=[0, 3]), "exactly one of layers or blocks"),
        (_stage(1, recompute_ops=["flash_attention"]), "recompute_ops"),
        ({**PLAN, "micro_batch": 1}, "exactly one of microbatches or micro_batch"),
        ({k: v for k, v in PLAN.items() if k != "stages"}, "plan.stages"),
        (_stage(0, pool="bad name"), "plan.stages.0.devices.0.pool"),
    ],
)
def test_stage_plan_errors_are_one_line(data, message):
    with pytest.raises(InputError) as err:
        stage_plan_from_dict(data)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "data, message",
    [
        (_stage(0, layers=13), "must sum to the model's 24"),
        (_stage(0, gpus=16, tp=4), "exceed the pool's 12"),
        (_stage(0, pool="a100"), "allowed: v100, t4"),
        (
            _stage(1, devices=[{"pool": "v100", "gpus": 2}, {"pool": "t4", "gpus": 6}], tp=4),
            "multiple of tp=4",
        ),
        ({**PLAN, "microbatches": 32}, "multiple of dp·microbatches"),
    ],
)
def test_stage_plan_rules_against_model_and_cluster(data, message):
    with pytest.raises(InputError) as err:
        check_stage_plan(stage_plan_from_dict(data), GPT2, cluster_from_dict(AMP_CLUSTER))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_blocks_must_cover_in_order():
    data = {
        **PLAN,
        "stages": [
            {"pool": "v100", "gpus": 8, "blocks": [0, 10]},
            {"pool": "t4", "gpus": 4, "blocks": [11, 26]},
        ],
    }
    with pytest.raises(InputError, match="must start at 10"):
        check_stage_plan(stage_plan_from_dict(data), GPT2, cluster_from_dict(AMP_CLUSTER))


def test_model_architecture_rules():
    t5 = ModelSpec(
        architecture="encoder_decoder",
        layers=12,
        encoder_layers=6,
        hidden=512,
        heads=8,
        ffn_hidden=2048,
        vocab=32128,
    )
    assert t5.total_layers == 18
    with pytest.raises(ValueError, match="encoder_layers=6 needs architecture"):
        ModelSpec(layers=12, encoder_layers=6, hidden=512, heads=8, ffn_hidden=2048, vocab=100)
    with pytest.raises(ValueError, match="must equal all transformer layers = 4"):
        ModelSpec(
            layers=4, hidden=64, heads=4, ffn_hidden=256, vocab=100, layer_widths=[{"count": 3}]
        )
    with pytest.raises(ValueError, match="not divisible by heads"):
        ModelSpec(
            layers=2,
            hidden=64,
            heads=4,
            ffn_hidden=256,
            vocab=100,
            layer_widths=[{"count": 2, "hidden": 66}],
        )


def test_shared_interface_gives_fewer_senders_more():
    c = cluster_from_dict(
        {
            "pools": [
                {"name": "v100", "system": "aws-p3.8xlarge", "nodes": 2, "nic_shared_by": 4},
                {"name": "t4", "system": "aws-g4dn.12xlarge", "nodes": 1, "nic_shared_by": 4},
            ]
        }
    )
    per_gpu = 1.25e9 / 4 * 0.9  # p3.8xlarge: 10 Gb/s per instance, 4 GPUs, 90 % achieved
    assert c.link_rate("v100", "v100")[0] == pytest.approx(per_gpu)
    assert c.link_rate("v100", "v100", 1, 1)[0] == pytest.approx(
        4 * per_gpu
    )  # one sender: the whole interface
    assert c.link_rate("v100", "v100", 2, 8)[0] == pytest.approx(
        per_gpu
    )  # the busier node sets the rate
    # to the T4 node (50 Gb/s): one sender on each side gets the 10 Gb/s interface of the p3 node
    assert c.link_rate("v100", "t4", 1, 1)[0] == pytest.approx(4 * per_gpu)
