"""Megatron-LM's start-up checks kept as facts (export/facts/megatron_checks.yaml): provenance, names,
and the checks deciding what they should on launch lines written by hand (issue 34)."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model
from paraplan.export import ExportRefused, export_plan, framework_args
from paraplan.export.startup import argument_map, failed_checks, startup_checks
from paraplan.specs.plan import PlanSpec


def _flags(cond) -> set[str]:
    """Every flag name a condition mentions."""
    if isinstance(cond, dict):
        return set().union(*(_flags(v) for v in cond.values()))
    if isinstance(cond, list):
        return set().union(*(_flags(v) for v in cond)) if cond else set()
    return {cond} if isinstance(cond, str) and cond.startswith("--") else set()


def test_every_check_has_provenance_and_names_megatron_flags_and_a_plan_knob():
    facts = startup_checks("megatron")
    names = framework_args("megatron").names
    assert facts.release.tag == framework_args("megatron").version
    assert facts.release.commit == framework_args("megatron").commit
    assert len(facts.checks) >= 15
    for c in facts.checks:
        assert c["file"].startswith("megatron/") and int(c["line"]) > 0, c["id"]
        assert c["knob"] in PlanSpec.model_fields, c["id"]
        assert _flags([c["if"], c["then"]]) <= names, c["id"]
    assert set(facts.defaults) <= names


def failed(line: str, env: dict | None = None) -> list[str]:
    return [c["id"] for c in failed_checks("megatron", line.split(), env or {})]


def test_the_fsdp_checks_of_the_issue():
    """ZeRO-2 as Megatron FSDP without --ckpt-format fsdp_dtensor, and with pp > 1, fail (issue 34)."""
    base = "--use-distributed-optimizer --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads"
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}
    assert failed(base, env) == ["megatron-fsdp-checkpoint-format"]
    assert failed(base + " --ckpt-format fsdp_dtensor", env) == []
    with_pp = base + " --ckpt-format fsdp_dtensor --pipeline-model-parallel-size 4"
    assert failed(with_pp, env) == ["megatron-fsdp-without-pipeline"]
    one = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}  # unset passes: Megatron asserts it is not "1"
    assert failed(base + " --ckpt-format fsdp_dtensor", one) == ["megatron-fsdp-connections"]
    assert failed("--tensor-model-parallel-size 2") == ["tp-cp-connections"]
    assert failed("--tensor-model-parallel-size 2", {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}) == []


def test_value_checks():
    assert failed(
        "--context-parallel-size 2 --seq-length 4098", {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    ) == ["context-parallel-sequence"]
    assert failed("--max-position-embeddings 2048 --seq-length 4096") == [
        "max-position-covers-sequence"
    ]
    assert failed("--num-layers 61 --pipeline-model-parallel-size 4") == [
        "layers-divide-over-stages"
    ]
    assert (
        failed(
            "--num-layers 61 --pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 16"
        )
        == []
    )
    assert failed("--expert-model-parallel-size 3 --num-experts 8") == [
        "expert-parallel-needs-experts"
    ]
    assert argument_map(["--a", "1", "--b", "--c", "x", "y"]) == {
        "--a": "1",
        "--b": True,
        "--c": ("x", "y"),
    }


def test_deepseek_v3_exports_as_the_moe_mla_mtp_model_it_is():
    model = load_model("deepseek-v3")
    plan = PlanSpec(
        gpus=2048,
        tp=1,
        pp=16,
        ep=64,
        global_batch=15360,
        seq_length=4096,
        dtype="fp8",
        zero=1,
        moe_dispatcher="deepep",
        layers_first_stage=4,
        layers_last_stage=1,
    )
    text = " ".join(export_plan("megatron", plan, model).split())
    for flag in (
        "--kv-channels 128",
        "--num-experts 256",
        "--moe-router-topk 8",
        "--moe-ffn-hidden-size 2048",
        "--moe-shared-expert-intermediate-size 2048",
        "--moe-layer-freq '[0]*3+[1]*58'",
        "--multi-latent-attention",
        "--q-lora-rank 1536",
        "--kv-lora-rank 512",
        "--qk-head-dim 128",
        "--qk-pos-emb-head-dim 64",
        "--v-head-dim 128",
        "--mtp-num-layers 1",
        "--moe-token-dispatcher-type flex",
        "--max-position-embeddings 163840",
    ):
        assert flag in text, flag
    assert "--kv-channels 56" not in text and "--num-query-groups" not in text


def test_mixtral_states_its_dispatcher_and_the_environment():
    model = load_model("mixtral-8x7b")
    plan = PlanSpec(gpus=16, tp=2, dp=8, global_batch=64, seq_length=4096, sequence_parallel=True)
    text = export_plan("megatron", plan, model)
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in text
    assert "--moe-token-dispatcher-type alltoall" in " ".join(text.split())


def test_zero2_with_pipeline_is_refused_by_knob():
    plan = PlanSpec(gpus=64, tp=4, pp=4, dp=4, global_batch=64, seq_length=2048, zero=2)
    with pytest.raises(ExportRefused, match=r"^plan\.zero=2 cannot be expressed in Megatron-LM"):
        export_plan("megatron", plan, load_model("gpt3-13b"))
    fsdp = export_plan(
        "megatron", plan.model_copy(update={"pp": 1, "dp": 16}), load_model("gpt3-13b")
    )
    assert "--ckpt-format fsdp_dtensor" in fsdp and "export CUDA_DEVICE_MAX_CONNECTIONS=32" in fsdp


@pytest.mark.parametrize(
    "line, env",
    [
        ("--tensor-model-parallel-size 2", {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}),
        ("--context-parallel-size 2", {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}),
        (
            "--use-megatron-fsdp --tensor-model-parallel-size 2",
            {"CUDA_DEVICE_MAX_CONNECTIONS": "32"},
        ),
        ("--tensor-model-parallel-size 2 --overlap-moe-expert-parallel-comm", {}),
        ("--pipeline-model-parallel-size 4", {}),
    ],
)
def test_the_launch_environment_is_read_from_the_facts(line, env):
    """export.startup.launch_environment sets what the facts' environment entries say, and that
    environment passes the checks that need it."""
    from paraplan.export.startup import launch_environment

    facts = startup_checks("megatron")
    ids = {c["id"] for c in facts.checks}
    assert all(set(values) <= ids for values in facts.environment.values())
    assert launch_environment("megatron", line.split()) == env
    connections = {"megatron-fsdp-connections", "tp-cp-connections"}
    assert not connections & set(failed(line, env))
