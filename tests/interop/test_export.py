"""Export -> import round trips for every framework, exported names against the kept argument lists,
and refusals that name the knob (issue 11)."""

from __future__ import annotations

import json
import random
import re
import shlex
import tomllib

import pytest
from pydantic import ValidationError

from paraplan.catalog import load_model
from paraplan.export import (
    FRAMEWORKS,
    ExportRefused,
    canonical_plan,
    export_plan,
    framework_args,
    import_plan,
)
from paraplan.export.common import check_handled
from paraplan.export.megatron_core import written_plan
from paraplan.export.torchtitan_split import written_plan as torchtitan_written_plan
from paraplan.specs.plan import PlanSpec, plan_violations

# 40 layers, 40 heads; a learned position table as long as the longest sequence below (Megatron-LM
# refuses a table shorter than the sequence: start-up check max-position-covers-sequence)
MODEL = load_model("gpt3-13b").model_copy(update={"max_position": 16384})


def sample_plans(n: int = 400) -> list[PlanSpec]:
    """Deterministic sample of valid plans over every knob export maps."""
    rng = random.Random(11)
    out: list[PlanSpec] = []
    while len(out) < n:
        tp, pp, cp = rng.choice([1, 2, 8]), rng.choice([1, 2, 4]), rng.choice([1, 2])
        dp = rng.choice([1, 2, 4])
        vpp = rng.choice([1, 1, 5]) if pp > 1 else 1
        mb = rng.choice([1, 2])
        fields = dict(
            gpus=tp * pp * cp * dp,
            tp=tp,
            pp=pp,
            cp=cp,
            vpp=vpp,
            micro_batch=mb,
            global_batch=dp * mb * pp * rng.choice([1, 2]),
            seq_length=4096,
            sequence_parallel=rng.random() < 0.5,
            recompute=rng.choice(["none", "selective", "full"]),
            zero=rng.choice([0, 1, 2, 3]),
            dtype=rng.choice(["bf16", "fp16", "fp8", "fp32"]),
            attention=rng.choice(["flash", "flash", "unfused"]),
            schedule=rng.choice(
                [None, "interleaved" if vpp > 1 else rng.choice(["1f1b", "gpipe"])]
            ),
            offload_weights=rng.random() < 0.15,
            offload_activations=rng.random() < 0.15,
            offload_optimizer=rng.random() < 0.2,
            overlap_dp_grad_reduce=rng.random() < 0.8,
            overlap_param_gather=rng.random() < 0.8,
            overlap_tp_comm=rng.random() < 0.3,
            placement=rng.choice(
                ["tp-cp-dp-pp", "tp-cp-dp-pp", "tp-cp-pp-dp", "cp-tp-dp-pp", "tp-dp-cp-pp"]
            ),
            tp_layout=rng.choice(["1d", "1d", "1d", "2d-seq", "2d"]),
            cp_algorithm="all-to-all"
            if cp > 1 and len(out) % 3 == 0
            else "ring",  # (not from rng: same stream)
        )
        split = (
            rng.choice(["default", "default", "first_last", "as_layer", "explicit"])
            if pp > 1
            else "default"
        )
        if split == "first_last":
            fields["layers_first_stage"] = (MODEL.layers // pp - 2) // vpp * vpp or vpp
        elif split == "as_layer":
            fields["embedding_as_layer"] = fields["loss_as_layer"] = True
        elif split == "explicit":
            fields["stage_layers"] = tuple([MODEL.layers // pp] * pp)
        try:
            plan = PlanSpec(**fields)
        except ValidationError:
            continue
        if not plan_violations(plan, MODEL):
            out.append(plan)
    return out


PLANS = sample_plans()


def _as_written(framework: str, plan: PlanSpec, text: str) -> PlanSpec:
    """The plan as an export that wrote a pipeline layout states it: its stage counts explicit, no split switches (a
    layout replaces them; an interleaved split with unequal chunks, or a split the split flags do not give, is
    written as one)."""
    if framework == "torchtitan":  # a split other than the even default: model parts
        return torchtitan_written_plan(plan, MODEL)
    return (
        written_plan(plan, MODEL) if framework in ("megatron", "nemo", "megatron-bridge") else plan
    )


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_export_import_round_trip_or_named_refusal(framework):
    """Every plan either exports and reads back as the same plan, or is refused naming a plan knob."""
    exported = refused = 0
    for plan in PLANS:
        try:
            text = export_plan(framework, plan, MODEL)
        except ExportRefused as exc:
            knob = re.match(r"plan\.(\w+)", str(exc))
            assert knob and knob.group(1) in PlanSpec.model_fields, str(exc)
            assert "\n" not in str(exc)
            refused += 1
            continue
        back = PlanSpec(**import_plan(framework, text, MODEL, plan.seq_length))
        assert canonical_plan(back) == canonical_plan(_as_written(framework, plan, text)), (
            framework,
            plan,
            text,
        )
        exported += 1
    assert exported >= 5 and refused >= 10, (exported, refused)  # both branches exercised


def _names(framework: str, text: str) -> list[str]:
    """The argument names an export uses, read from its text independently of the exporter."""
    if framework == "megatron":
        return [
            t.split("=")[0]
            for t in shlex.split(text.replace("\\\n", " "), comments=True)
            if t.startswith("--")
        ]
    if framework == "nemo":
        return re.findall(r"^recipe\.([\w.]+) =", text, flags=re.M)
    if framework == "megatron-bridge":  # cfg.<path> = ..., and CommOverlapConfig's arguments
        overlap = re.search(r"CommOverlapConfig\((.*)\)", text).group(1)
        return re.findall(r"^cfg\.([\w.]+) =", text, flags=re.M) + [
            f"comm_overlap.{k}" for k in re.findall(r"(\w+)=", overlap)
        ]
    if framework == "torchtitan":
        return [f"{s}.{k}" for s, fields in tomllib.loads(text).items() for k in fields]

    def paths(d, prefix=""):
        return [
            p
            for k, v in d.items()
            for p in (paths(v, f"{prefix}{k}.") if isinstance(v, dict) else [f"{prefix}{k}"])
        ]

    return paths(json.loads(text))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_exported_names_exist_in_the_kept_argument_list(framework):
    args = framework_args(framework)
    launcher = {"--nnodes", "--nproc-per-node"}
    seen: set[str] = set()
    for plan in PLANS:
        try:
            text = export_plan(framework, plan, MODEL)
        except ExportRefused:
            continue
        names = set(_names(framework, text)) - launcher
        assert names <= args.names, names - args.names
        seen |= names
    assert len(seen) >= 8
    assert args.version and args.commit and args.source


def test_kept_lists_hold_the_real_names_and_choices():
    meg = framework_args("megatron")
    assert {
        "--tensor-model-parallel-size",
        "--num-virtual-stages-per-pipeline-rank",
        "--recompute-granularity",
    } <= meg.names
    assert meg.choices["--data-parallel-sharding-strategy"] == [
        "no_shard",
        "optim",
        "optim_grads",
        "optim_grads_params",
    ]
    assert (
        "--tensor-parallel-size" not in meg.names
    )  # a plausible but wrong name is not in the list
    assert "parallelism.data_parallel_shard_degree" in framework_args("torchtitan").names
    assert "zero_optimization.stage" in framework_args("deepspeed").names


def test_megatron_export_of_a_known_plan():
    plan = PlanSpec(
        gpus=64,
        tp=8,
        pp=2,
        vpp=5,
        micro_batch=1,
        global_batch=64,
        seq_length=2048,
        sequence_parallel=True,
        recompute="full",
        zero=1,
        dtype="fp8",
    )
    text = export_plan("megatron", plan, MODEL)
    flags = " ".join(text.split())
    assert "torchrun --nnodes 8 --nproc-per-node 8" in flags
    for part in (
        "--tensor-model-parallel-size 8",
        "--num-virtual-stages-per-pipeline-rank 5",
        "--recompute-granularity full",
        "--recompute-method uniform",
        "--use-distributed-optimizer",
        "--fp8-format hybrid",
        "--num-layers 40",
    ):
        assert part in flags


@pytest.mark.parametrize(
    ("framework", "fields", "knob"),
    [
        ("megatron", dict(schedule="gpipe", pp=2), "schedule"),
        ("megatron", dict(offload_weights=True), "offload_weights"),
        ("torchtitan", dict(zero=1, dp=8), "zero"),
        ("torchtitan", dict(recompute="selective"), "recompute"),
        ("deepspeed", dict(cp=2), "cp"),
        ("deepspeed", dict(tp=2, sequence_parallel=True), "sequence_parallel"),
        ("nemo", dict(placement="dp-tp-cp-pp", tp=2), "placement"),
    ],
)
def test_refusals_name_the_knob(framework, fields, knob):
    base = dict(tp=1, pp=1, cp=1, dp=8, micro_batch=1, seq_length=2048)
    base.update(fields)
    base["gpus"] = base["tp"] * base["pp"] * base["cp"] * base["dp"]
    base["global_batch"] = base["dp"] * base["pp"]
    plan = PlanSpec(**base)
    with pytest.raises(ExportRefused, match=rf"^plan\.{knob}="):
        export_plan(framework, plan, MODEL)


def test_a_plan_field_without_mapping_is_refused_not_dropped():
    plan = PlanSpec(gpus=8, global_batch=8, seq_length=2048, ep=2)
    with pytest.raises(ExportRefused, match=r"^plan\.ep=2"):
        check_handled(plan, set(PlanSpec.model_fields) - {"ep"}, "X")


@pytest.mark.parametrize(
    ("framework", "text", "message"),
    [
        (
            "megatron",
            "torchrun --nnodes 1 --nproc-per-node 8 pretrain_gpt.py --global-batch-size 8 --seq-length 64 "
            "--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'Et*2|mt*2L'",
            "MTP",
        ),
        (
            "megatron",
            "torchrun --nnodes 1 --nproc-per-node 8 pretrain_gpt.py --global-batch-size 8 --seq-length 64 "
            "--recompute-modules core_attn",
            "recompute-modules",
        ),
        (
            "megatron",
            "torchrun --nnodes 1 --nproc-per-node 8 pretrain_gpt.py --global-batch-size 8 --seq-length 64 "
            "--recompute-granularity full --recompute-method uniform --recompute-num-layers 2",
            "uniform",
        ),
        (
            "megatron",
            "torchrun --nnodes 1 --nproc-per-node 8 pretrain_gpt.py --global-batch-size 8 --seq-length 64 --tensor-parallel 2",
            "not a Megatron-LM",
        ),
        (
            "deepspeed",
            '{"train_batch_size": 8, "activation_checkpointing": {"partition_activations": true}}',
            "partition_activations",
        ),
        ("deepspeed", '{"train_batch_size": 8, "sequence_parallel_size": 2}', "Ulysses"),
        ("torchtitan", "[parallelism]\npipeline_parallel_degree = 2\n", "less_layers"),
        ("nemo", "recipe.trainer.strategy.tensor_parallel = 2\n", "not a known NeMo"),
    ],
)
def test_import_refuses_what_the_plan_cannot_hold(framework, text, message):
    with pytest.raises(ExportRefused, match=message):
        import_plan(framework, text, MODEL, 2048)


def test_megatron_layout_round_trip_with_interleaving():
    plan = PlanSpec(
        gpus=8,
        pp=4,
        vpp=2,
        dp=2,
        micro_batch=1,
        global_batch=8,
        seq_length=2048,
        stage_layers=(8, 12, 12, 8),
    )
    text = export_plan("megatron", plan, MODEL)
    assert "--pipeline-model-parallel-layout 'Et*4|t*6|t*6|t*4|t*4|t*6|t*6|t*4L'" in text
    back = PlanSpec(**import_plan("megatron", text))
    assert back.stage_layers == (8, 12, 12, 8) and back.vpp == 2


def test_import_ignores_settings_that_do_not_change_the_plan():
    cfg = {
        "train_batch_size": 32,
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 2,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
        "gradient_clipping": 1.0,
        "bf16": {"enabled": True},
        "activation_checkpointing": {"partition_activations": False},
    }
    fields = import_plan("deepspeed", json.dumps(cfg), None, 2048)
    assert (fields["gpus"], fields["dp"], fields["recompute"]) == (8, 8, "full")
    argv = (
        "torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 2 --lr 3e-4 "
        "--global-batch-size 64 --seq-length 4096 --num-layers 40 --pipeline-model-parallel-size 2 "
        "--num-layers-per-virtual-pipeline-stage 4"
    )
    fields = import_plan("megatron", argv)
    assert (fields["gpus"], fields["tp"], fields["vpp"], fields["schedule"]) == (
        16,
        2,
        5,
        "interleaved",
    )


def test_megatron_block_recompute_round_trips():
    """--recompute-method block --recompute-num-layers N is the plan's recompute_num_layers (issue 8)."""
    plan = PlanSpec(
        gpus=8,
        pp=2,
        dp=4,
        global_batch=8,
        seq_length=2048,
        recompute="full",
        recompute_num_layers=3,
    )
    text = export_plan("megatron", plan, MODEL)
    assert "--recompute-method block" in text and "--recompute-num-layers 3" in text
    back = PlanSpec(**import_plan("megatron", text))
    assert (back.recompute, back.recompute_num_layers) == ("full", 3)
    with pytest.raises(ExportRefused, match="recompute_num_layers"):  # torchtitan has no such knob
        export_plan("torchtitan", plan, MODEL)


def test_megatron_cp_comm_type_a2a_is_ulysses():
    """Megatron-Core's --cp-comm-type a2a (all-to-all over the heads) is cp_algorithm 'all-to-all' both ways;
    the hierarchical a2a+p2p has no plan field and is refused by name."""
    plan = PlanSpec(
        gpus=16, tp=2, cp=4, dp=2, global_batch=8, seq_length=8192, cp_algorithm="all-to-all"
    )
    text = export_plan("megatron", plan, MODEL)
    assert "--cp-comm-type a2a" in text
    assert import_plan("megatron", text)["cp_algorithm"] == "all-to-all"
    with pytest.raises(ExportRefused, match="a2a\\+p2p"):
        import_plan("megatron", text.replace("--cp-comm-type a2a", "--cp-comm-type a2a+p2p"))


def test_deepspeed_live_parameter_cap_round_trips():
    """plan.zero3_max_live_params <-> zero_optimization.stage3_max_live_parameters at ZeRO 3."""
    plan = PlanSpec(
        gpus=8, dp=8, global_batch=16, seq_length=2048, zero=3, zero3_max_live_params=2e9
    )
    cfg = json.loads(export_plan("deepspeed", plan, MODEL))
    assert cfg["zero_optimization"]["stage3_max_live_parameters"] == 2_000_000_000
    back = import_plan("deepspeed", json.dumps(cfg), MODEL, 2048)
    assert back["zero3_max_live_params"] == 2e9
    del cfg["zero_optimization"]["stage3_max_live_parameters"]
    assert import_plan("deepspeed", json.dumps(cfg), MODEL, 2048)["zero3_max_live_params"] is None


def test_uneven_interleaving_exports_as_a_layout_and_bridge_layouts_import():
    """An interleaved plan whose stages do not cut into equal chunks (DeepSeek-V3, 61 layers, pp 8 × vpp 4 with 7 / 6
    on the first / last stage, the moe-visible H100 case) is written as Megatron-Core's pipeline layout, its MTP module
    'm' beside the loss (the layout wants it in the last chunk, after the decoder layers), and reads back as the same
    stage counts, its recomputed modules as --recompute-modules; Megatron-Bridge's own DeepSeek-V3 layouts
    (recipes/deepseek, (8, 4) and (4, 4)) import."""
    from paraplan.export.megatron_core import stage_layers_from_layout

    model = load_model("deepseek-v3")
    plan = PlanSpec(
        gpus=1024,
        tp=2,
        pp=8,
        vpp=4,
        micro_batch=1,
        global_batch=8192,
        seq_length=4096,
        sequence_parallel=True,
        zero=1,
        dtype="fp8",
        ep=64,
        layers_first_stage=7,
        layers_last_stage=6,
        recompute="selective",
        recompute_modules=("mla_up_proj", "mlp"),
    )
    assert not plan_violations(plan, model)
    text = export_plan("megatron", plan, model)
    layout = re.search(r"--pipeline-model-parallel-layout '([^']+)'", text).group(1)
    chunks = layout.split("|")
    assert len(chunks) == 32 and chunks[0].startswith("E") and chunks[-1].endswith("mL")
    assert "--decoder-first-pipeline-num-layers" not in text  # the layout replaces the split flags
    assert "--recompute-modules mla_up_proj mlp" in " ".join(
        text.split()
    )  # Megatron-Core's names, a list flag
    back = import_plan("megatron", text, model, plan.seq_length)
    assert back["stage_layers"] == (7, 8, 8, 8, 8, 8, 8, 6) and back["vpp"] == 4
    assert back["recompute_modules"] == ("mla_up_proj", "mlp") and back["recompute"] == "selective"
    assert stage_layers_from_layout("Et|(tt|)*30mL", 8) == ((7, 8, 8, 8, 8, 8, 8, 6), 4)
    assert stage_layers_from_layout("Et*4|(t*4|)*14tmL", 4) == ((16, 16, 16, 13), 4)
    with pytest.raises(ExportRefused, match="MTP"):
        stage_layers_from_layout("Etm|tL", 2)


def test_deepspeed_gradient_accumulation_dtype_round_trips():
    """plan.grad_dtype <-> data_types.grad_accum_dtype (DeepSpeedEngine.get_data_types: the model dtype under ZeRO
    by default): fp32 gradients of a half-precision model are stated, 2-byte ones are DeepSpeed's default, and
    fp32 accumulation of an fp16 model without ZeRO, which DeepSpeed rejects, is refused."""
    fields = {
        "gpus": 8,
        "dp": 8,
        "global_batch": 16,
        "seq_length": 2048,
        "attention": "flash",
        "dtype": "bf16",
    }
    for zero in (0, 1, 2, 3):
        fp32 = json.loads(export_plan("deepspeed", PlanSpec(**fields, zero=zero), MODEL))
        assert fp32["data_types"] == {"grad_accum_dtype": "fp32"}
        assert import_plan("deepspeed", json.dumps(fp32), MODEL, 2048)["grad_dtype"] == "fp32"
        half = json.loads(
            export_plan("deepspeed", PlanSpec(**fields, zero=zero, grad_dtype="bf16"), MODEL)
        )
        assert "data_types" not in half
        assert import_plan("deepspeed", json.dumps(half), MODEL, 2048)["grad_dtype"] == "bf16"
    with pytest.raises(ExportRefused, match="grad_dtype"):
        export_plan("deepspeed", PlanSpec(**{**fields, "dtype": "fp16"}, zero=0), MODEL)
    fp16 = PlanSpec(**{**fields, "dtype": "fp16"}, zero=1)
    assert (
        json.loads(export_plan("deepspeed", fp16, MODEL))["data_types"]["grad_accum_dtype"]
        == "fp32"
    )
