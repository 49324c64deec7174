"""NeMo, torchtitan and DeepSpeed start-up checks kept as facts (export/facts/<name>_checks.yaml): provenance,
the keys they read are the exporters' kept keys, the checks decide what they should, and the exports that break
one are refused by name (issue 34). NeMo's MoE, MLA and MTP mapping (Megatron-Core dataclass fields)."""

from __future__ import annotations

import re

import pytest

from paraplan.catalog import load_model
from paraplan.export import ExportRefused, export_plan, framework_args, import_plan
from paraplan.export.common import canonical_plan
from paraplan.export.startup import failed_key_checks, startup_checks
from paraplan.specs.plan import PlanSpec

KEYED = ("nemo", "megatron-bridge", "torchtitan", "deepspeed")


def _keys(cond) -> set[str]:
    """Every key or flag name a condition reads."""
    if isinstance(cond, dict):
        out: set[str] = set()
        for k, v in cond.items():
            out |= {v} if k in ("key", "flag", "present") and isinstance(v, str) else _keys(v)
        return out
    if isinstance(cond, list):
        return set().union(*(_keys(v) for v in cond)) if cond else set()
    return {cond} if isinstance(cond, str) and cond.startswith("--") else set()


@pytest.mark.parametrize("name", ("megatron", *KEYED))
def test_every_check_has_provenance_and_reads_kept_keys(name):
    facts, kept = startup_checks(name), framework_args(name)
    assert (facts.release.tag, facts.release.commit) == (kept.version, kept.commit)
    assert re.fullmatch(r"[0-9a-f]{40}", facts.release.commit)
    ids = [c["id"] for c in facts.checks]
    assert len(ids) == len(set(ids)) >= 5
    for c in facts.checks:
        assert int(c["line"]) > 0 and c["file"].endswith(".py"), c["id"]
        assert c["knob"] in PlanSpec.model_fields, c["id"]
        assert c["says"].strip(), c["id"]
        assert _keys([c["if"], c["then"]]) <= kept.names, c["id"]
    assert set(facts.defaults) <= kept.names


def failed(name: str, given: dict, **context) -> list[str]:
    return [c["id"] for c in failed_key_checks(name, given, {}, context)]


def test_torchtitan_checks():
    par = "parallelism."
    ddp = {par + "data_parallel_replicate_degree": 4, par + "data_parallel_shard_degree": 1}
    assert failed("torchtitan", {**ddp, par + "tensor_parallel_degree": 2}, world_size=8) == [
        "ddp-is-one-dimensional"
    ]
    assert failed("torchtitan", ddp, world_size=4) == []
    assert failed("torchtitan", ddp, world_size=8) == ["degrees-fill-the-world"]
    shard = {par + "data_parallel_shard_degree": 8, par + "tensor_parallel_degree": 2}
    assert failed("torchtitan", {**shard, "training.seq_len": 4098}, world_size=16) == [
        "sequence-divides"
    ]
    stages = {
        **shard,
        par + "pipeline_parallel_degree": 4,
        par + "pipeline_parallel_first_stage_less_layers": 0,
        par + "pipeline_parallel_last_stage_less_layers": 0,
        par + "pipeline_parallel_layers_per_stage": 8,
        "training.local_batch_size": 8,
    }
    assert failed("torchtitan", stages, world_size=64, n_layers=32) == []
    assert failed("torchtitan", stages, world_size=64, n_layers=64) == [
        "single-stage-schedule-one-stage-per-rank"
    ]
    interleaved = {**stages, par + "pipeline_parallel_schedule": "Interleaved1F1B"}
    assert failed("torchtitan", interleaved, world_size=64, n_layers=32) == [
        "multi-stage-schedule-two-stages-per-rank"
    ]
    # torchtitan's defaults weigh the embedding and the output as one layer each: 34 units, 5 stages
    default_weights = {k: v for k, v in stages.items() if "less_layers" not in k}
    assert "stages-divide-over-ranks" in failed(
        "torchtitan", default_weights, world_size=64, n_layers=32
    )
    assert failed("torchtitan", {par + "enable_async_tensor_parallel": True}, world_size=1) == [
        "async-tp-needs-compile"
    ]
    experts = {**shard, par + "expert_parallel_degree": 32}
    assert failed("torchtitan", experts, world_size=16) == ["expert-mesh-divides"]


def test_deepspeed_checks():
    cfg = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2}
    cfg["gradient_accumulation_steps"] = 4
    assert failed("deepspeed", cfg, dp_world_size=8) == []
    assert failed("deepspeed", cfg, dp_world_size=4) == ["batch-is-micro-accumulation-dp"]
    both = {"bf16.enabled": True, "fp16.enabled": True}
    assert failed("deepspeed", {**cfg, **both}, dp_world_size=8) == ["one-half-precision"]
    piped = {**cfg, "pipeline.stages": 4, "zero_optimization.stage": 2}
    assert failed("deepspeed", piped, dp_world_size=8) == ["pipeline-zero-below-2"]
    autotp = {**cfg, "tensor_parallel.autotp_size": 2, "zero_optimization.stage": 3}
    assert failed("deepspeed", autotp, dp_world_size=8) == ["autotp-zero-below-3"]
    assert failed("deepspeed", {**cfg, "zero_optimization.stage": 3}, dp_world_size=8) == []


def test_nemo_checks():
    s = "trainer.strategy."
    assert failed("nemo", {s + "tensor_model_parallel_size": 2}, tp_comm_overlap=True) == [
        "tp-overlap-needs-tp-and-sequence-parallel"
    ]
    assert failed("nemo", {s + "fsdp": "megatron", s + "pipeline_model_parallel_size": 2}) == [
        "megatron-fsdp-without-pipeline"
    ]
    deepep = {"model.config.moe_enable_deepep": True}
    assert failed("nemo", deepep) == ["deepep-needs-flex"]
    assert failed("nemo", {**deepep, "model.config.moe_token_dispatcher_type": "flex"}) == []
    pp = {s + "pipeline_model_parallel_size": 8}
    assert failed("nemo", pp, n_layers=61) == ["layers-divide-over-stages"]
    assert failed("nemo", pp) == []  # without the model, the recipe's layers are not known


@pytest.mark.parametrize(
    ("framework", "fields", "check"),
    [
        ("torchtitan", {"dp": 4, "tp": 2, "zero": 0, "sequence_parallel": True}, "ddp-is-one"),
        ("deepspeed", {"dp": 4, "tp": 2, "zero": 3}, "autotp-zero-below-3"),
        ("nemo", {"dp": 4, "tp": 2, "overlap_tp_comm": True}, "tp-overlap-needs-tp-and-sequence"),
    ],
)
def test_an_export_that_cannot_start_is_refused_naming_the_check(framework, fields, check):
    plan = PlanSpec(gpus=8, micro_batch=1, global_batch=32, seq_length=2048, **fields)
    with pytest.raises(ExportRefused, match=rf"^plan\.\w+=.* cannot start in .*{check}"):
        export_plan(framework, plan, load_model("gpt3-1.3b"))


def test_nemo_writes_the_moe_mla_mtp_model_and_reads_the_expert_knobs_back():
    model = load_model("deepseek-v3")
    plan = PlanSpec(
        gpus=2048,
        tp=2,
        pp=8,
        vpp=4,
        schedule="interleaved",
        ep=64,
        global_batch=15360,
        seq_length=4096,
        sequence_parallel=True,
        dtype="fp8",
        zero=1,
        moe_dispatcher="deepep",
        moe_a2a_overlap=True,
    )
    text = export_plan("nemo", plan, model)
    for line in (
        "recipe.model.config.num_moe_experts = 256",
        "recipe.model.config.moe_router_topk = 8",
        "recipe.model.config.moe_ffn_hidden_size = 2048",
        "recipe.model.config.moe_shared_expert_intermediate_size = 2048",
        "recipe.model.config.moe_token_dispatcher_type = 'flex'",
        "recipe.model.config.moe_enable_deepep = True",
        "recipe.model.config.overlap_moe_expert_parallel_comm = True",
        "recipe.trainer.strategy.expert_tensor_parallel_size = 1",
        "recipe.model.config.multi_latent_attention = True",
        "recipe.model.config.kv_lora_rank = 512",
        "recipe.model.config.qk_head_dim = 128",
        "recipe.model.config.mtp_num_layers = 1",
        "recipe.model.config.moe_layer_freq = [0, 0, 0, 1,",
        "recipe.trainer.plugins.fp8_param_gather = True",
        "recipe.trainer.strategy.pipeline_model_parallel_layout = 'E",
    ):
        assert line in text, line
    back = PlanSpec(**import_plan("nemo", text, model))
    for knob in ("ep", "etp", "moe_dispatcher", "moe_a2a_overlap", "fp8_weight_copies", "vpp"):
        assert getattr(back, knob) == getattr(plan, knob), knob
    # the same plan with two MTP layers cannot overlap the EP all-to-all (Megatron-Core asserts one)
    two = model.model_copy(update={"mtp_layers": 2})
    with pytest.raises(ExportRefused, match="a2a-overlap"):
        export_plan("nemo", plan, two)


def test_grad_dtype_and_fp8_weights_round_trip_through_megatron_and_nemo():
    model = load_model("gpt3-13b")
    base = PlanSpec(gpus=16, tp=2, dp=8, global_batch=64, seq_length=2048, zero=1)
    for fields in (
        {"grad_dtype": "bf16"},
        {"dtype": "fp8"},
        {"dtype": "fp8", "fp8_weight_copies": True},
        {"dtype": "fp8", "zero": 0, "dp": 1, "gpus": 2, "global_batch": 8},
    ):
        plan = base.model_copy(update=fields)
        for fw in ("megatron", "nemo"):
            back = PlanSpec(**import_plan(fw, export_plan(fw, plan, model), model))
            assert canonical_plan(back) == canonical_plan(plan), (fw, fields)
    text = export_plan("megatron", base.model_copy(update={"dtype": "fp8"}), model)
    assert "--fp8-param-gather" in text
    with pytest.raises(ExportRefused, match="fp8_weight_copies=False cannot start"):
        export_plan("megatron", base.model_copy(update={"dtype": "fp8", "zero": 0}), model)


def test_qwen3_exports_its_per_head_qk_norm():
    """Qwen3's q/k norms reach Megatron-LM as --qk-layernorm and NeMo as qk_layernorm (a key the NeMo
    facts keep); a model without them writes neither."""
    plan = PlanSpec(gpus=64, tp=2, ep=8, global_batch=512, seq_length=4096, zero=1)
    qwen3 = load_model("qwen3-30b-a3b")
    assert "--qk-layernorm" in export_plan("megatron", plan, qwen3)
    assert "recipe.model.config.qk_layernorm = True" in export_plan("nemo", plan, qwen3)
    mixtral = load_model("mixtral-8x7b")
    assert "--qk-layernorm" not in export_plan("megatron", plan, mixtral)
    assert "qk_layernorm" not in export_plan("nemo", plan, mixtral)


@pytest.mark.parametrize("name", ("megatron", *KEYED))
def test_every_launch_setting_has_provenance_and_reads_kept_keys(name):
    """The facts' ``settings`` (environment a framework's own launcher sets): a variable, a value, the
    file and line it is read from, and a condition over the kept keys."""
    facts, kept = startup_checks(name), framework_args(name)
    for s in facts.settings:
        assert re.fullmatch(r"[A-Z][A-Z0-9_]+", s["variable"]) and str(s["value"]), s
        assert int(s["line"]) > 0 and s["file"].endswith(".py") and s["says"].strip(), s
        assert _keys(s["if"]) <= kept.names, s


@pytest.mark.parametrize(
    "fields, connections",
    [({"tp": 8, "pp": 2}, "1"), ({"cp": 2}, "1"), ({"tp": 1}, None)],
)
def test_nemo_states_the_launch_environment_perfenvplugin_sets(fields, connections):
    """NeMo v2.4.0's PerfEnvPlugin (nemo/lightning/run/plugins.py): CUDA_DEVICE_MAX_CONNECTIONS=1 with
    tp or cp > 1 (before Blackwell), the LayerNorm SM margins and NCCL's high-priority streams always;
    written as comments to apply on the executor, so the override still imports."""
    plan = PlanSpec(gpus=64, global_batch=64, micro_batch=1, seq_length=4096, **fields)
    text = export_plan("nemo", plan)
    env = dict(
        re.findall(
            r'^# executor\.env_vars\["(\w+)"\] = "(\w+)"  # NVIDIA/NeMo@v2\.4\.0 ', text, re.M
        )
    )
    assert env.get("CUDA_DEVICE_MAX_CONNECTIONS") == connections
    assert env["NVTE_FWD_LAYERNORM_SM_MARGIN"] == env["NVTE_BWD_LAYERNORM_SM_MARGIN"] == "16"
    assert env["TORCH_NCCL_HIGH_PRIORITY"] == "1"
    assert import_plan("nemo", text)["tp"] == plan.tp
