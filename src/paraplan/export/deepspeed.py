"""DeepSpeed: a JSON configuration (``--deepspeed_config``).

Keys are those of DeepSpeed v0.16.4 (kept in ``frameworks/deepspeed.yaml``). The data-parallel
degree is implied by ``train_batch_size = micro · accumulation · dp``; the pipeline is DeepSpeed's
1F1B ``TrainSchedule`` (ZeRO 2/3 cannot be combined with it); tensor parallelism is AutoTP training
(``tensor_parallel.autotp_size``), which has neither Megatron sequence parallelism nor overlapped
TP communication; ring context parallelism does not exist (DeepSpeed-Ulysses is head-parallel
all-to-all, a different scheme). The sequence length and the attention kernel are set by the
training script, not by this file: import takes the sequence length as an option.
"""

from __future__ import annotations

import json

from paraplan.export.common import (
    COMMON_FIELDS,
    ExportRefused,
    check_names,
    exportable,
    framework_args,
    refuse,
    same_placement,
)
from paraplan.export.startup import refuse_failed_keys
from paraplan.io.fields import Doc
from paraplan.specs.plan import PlanSpec
from paraplan.specs.rules import deepspeed_cp_rule

NAME = "deepspeed"
ORDER = "tp-dp-pp"  # PipeModelDataParallelTopology axes ['pipe', 'data', 'model'], model innermost
# Keys that change the plan in ways paraplan's PlanSpec cannot hold: refused on import. Other keys
# (optimizer, scheduler, logging, bucket sizes, ...) do not change the plan and are ignored.
UNREPRESENTABLE = {  # key: (what it is, the JSON values that leave the plan unchanged)
    "sequence_parallel_size": ("DeepSpeed-Ulysses sequence parallelism", ("1",)),
    "zero_optimization.zero_hpz_partition_size": ("ZeRO++ hierarchical partitioning", ("1",)),
    "zero_optimization.mics_shard_size": ("MiCS sharding", ("-1",)),
    "activation_checkpointing.partition_activations": (
        "activations partitioned over tensor-parallel ranks",
        ("false",),
    ),
    "pipeline.activation_checkpoint_interval": ("checkpointing every n-th pipeline layer", ("0",)),
}
HANDLED = COMMON_FIELDS | {
    "offload_weights",
    "offload_activations",
    "zero3_max_live_params",
    "grad_dtype",
}


def config(plan: PlanSpec) -> dict:
    """The DeepSpeed config dict; refuses what DeepSpeed cannot run."""
    fw, c = exportable(plan, NAME, HANDLED)
    _check_parallelism(plan, c, fw)
    _check_kernels_and_memory(plan, c, fw)
    zero: dict[str, object] = {
        "stage": c["zero"],
        "overlap_comm": c["overlap_dp_grad_reduce"],
        "contiguous_gradients": True,
    }
    if plan.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu"}
    if plan.offload_weights:
        zero["offload_param"] = {"device": "cpu"}
    if c["zero"] == 3 and plan.zero3_max_live_params is not None:
        zero["stage3_max_live_parameters"] = int(plan.zero3_max_live_params)
    cfg: dict[str, object] = {
        "train_batch_size": plan.global_batch,
        "train_micro_batch_size_per_gpu": plan.micro_batch,
        "gradient_accumulation_steps": plan.microbatches,
        "bf16": {"enabled": plan.dtype == "bf16"},
        "fp16": {"enabled": plan.dtype == "fp16"},
        "zero_optimization": zero,
    }
    if accum := grad_accum_dtype(plan, c["zero"], fw):
        cfg["data_types"] = {"grad_accum_dtype": accum}
    if plan.recompute == "full":
        cfg["activation_checkpointing"] = {
            "partition_activations": False,
            "cpu_checkpointing": plan.offload_activations,
            "contiguous_memory_optimization": False,
        }
    if plan.pp > 1:
        cfg["pipeline"] = {"stages": plan.pp, "partition": "uniform"}
    if plan.tp > 1:
        cfg["tensor_parallel"] = {"autotp_size": plan.tp}
    return cfg


def grad_accum_dtype(plan: PlanSpec, zero: int, fw: str) -> str | None:
    """``data_types.grad_accum_dtype`` for the plan's gradient dtype, None where DeepSpeed's default is it.
    DeepSpeedEngine.get_data_types (runtime/engine.py, v0.10.0-v0.16.4) defaults to the model dtype under ZeRO,
    the plan's 2-byte grad_dtype (a bf16 model without ZeRO runs the BF16_Optimizer's fp32 gradients by
    default, a stack rule the deepspeed profile prices whatever grad_dtype: step.constants.zero0_terms), so
    fp32 gradients of a half-precision model are stated, and refused for fp16 without ZeRO, which
    _do_optimizer_sanity_check rejects ("unsupported mix of model dtype and gradient accumulation type")."""
    if plan.dtype not in ("bf16", "fp16") or plan.grad_dtype != "fp32":
        return None
    if plan.dtype == "fp16" and zero == 0:
        raise refuse(
            fw,
            "grad_dtype",
            "fp32",
            "DeepSpeed's FP16 optimizer keeps fp16 gradients without ZeRO (get_data_types)",
        )
    return "fp32"


def _check_parallelism(plan: PlanSpec, c: dict, fw: str) -> None:
    """Refuse a parallelism DeepSpeed cannot run: ring context parallelism, another rank order,
    Megatron sequence parallelism or overlapped TP collectives, a schedule other than 1F1B, ZeRO 2/3
    with a pipeline (``c``: the canonical plan)."""
    if rule := deepspeed_cp_rule(plan.cp):
        raise refuse(fw, "cp", plan.cp, rule)
    if not same_placement(plan, ORDER):
        raise refuse(
            fw,
            "placement",
            plan.placement,
            "DeepSpeed's topology places tp innermost, then dp, then pp",
        )
    if c["sequence_parallel"]:
        raise refuse(
            fw,
            "sequence_parallel",
            True,
            "AutoTP training has no Megatron-style sequence parallelism",
        )
    if c["overlap_tp_comm"]:
        raise refuse(
            fw,
            "overlap_tp_comm",
            True,
            "AutoTP training does not overlap TP collectives with GEMMs",
        )
    if c["schedule"] != "1f1b":
        raise refuse(
            fw,
            "schedule",
            c["schedule"],
            "DeepSpeed's pipeline engine runs 1F1B (TrainSchedule) only",
        )
    if plan.pp > 1 and c["zero"] >= 2:
        raise refuse(
            fw, "zero", c["zero"], "DeepSpeed's pipeline engine supports ZeRO stages 0 and 1 only"
        )


def _check_kernels_and_memory(plan: PlanSpec, c: dict, fw: str) -> None:
    """Refuse what the config cannot set or DeepSpeed cannot run: fp8, the attention kernel, selective
    recomputation, offloads without their ZeRO stage, the two overlaps apart."""
    if plan.dtype == "fp8":
        raise refuse(
            fw,
            "dtype",
            "fp8",
            "the DeepSpeed config has no fp8 training switch (Transformer Engine is set in the script)",
        )
    if plan.attention != "flash":
        raise refuse(
            fw,
            "attention",
            plan.attention,
            "the attention kernel is chosen by the training script, not the config",
        )
    if plan.recompute == "selective":
        raise refuse(
            fw,
            "recompute",
            "selective",
            "DeepSpeed checkpoints whole layers (activation_checkpointing)",
        )
    if plan.offload_activations and plan.recompute != "full":
        raise refuse(
            fw,
            "offload_activations",
            True,
            "cpu_checkpointing offloads only the checkpoints of full recomputation",
        )
    if plan.offload_weights and c["zero"] != 3:
        raise refuse(fw, "offload_weights", True, "offload_param needs ZeRO stage 3")
    if plan.offload_optimizer and c["zero"] == 0:
        raise refuse(fw, "offload_optimizer", True, "offload_optimizer needs ZeRO stage 1 or more")
    if c["zero"] >= 1 and c["overlap_param_gather"] != c["overlap_dp_grad_reduce"]:
        raise refuse(
            fw,
            "overlap_param_gather",
            c["overlap_param_gather"],
            "DeepSpeed has one switch (zero_optimization.overlap_comm) for both overlaps",
        )


def _paths(d: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in d.items():
        out += _paths(v, f"{prefix}{k}.") if isinstance(v, dict) else [f"{prefix}{k}"]
    return out


def _get(d: dict, path: str):
    for key in path.split("."):
        d = d[key]
    return d


def export(plan: PlanSpec) -> str:
    """The JSON text (JSON has no comments: provenance goes to the command's stderr)."""
    cfg = config(plan)
    fw = framework_args(NAME)
    check_names(fw, _paths(cfg))
    given = {p: _get(cfg, p) for p in _paths(cfg)}
    refuse_failed_keys(NAME, fw.label, plan, given, {"dp_world_size": plan.dp})
    return json.dumps(cfg, indent=2) + "\n"


def import_plan(text: str, seq_length: int | None = None) -> dict[str, object]:
    """PlanSpec fields from a DeepSpeed config; ``seq_length`` comes from the caller (the script's)."""
    from paraplan.io.documents import (
        parse_document,
    )  # here: an export (a search's launch targets) needs no YAML

    cfg = Doc(parse_document(text, "the DeepSpeed config", "deepspeed", as_json=True), "deepspeed")
    flat = {p: _get(cfg.data, p) for p in _paths(cfg.data)}
    for key, (what, neutral) in UNREPRESENTABLE.items():
        value = flat.get(key)
        if value is not None and json.dumps(value) not in neutral:
            raise ExportRefused(
                f"deepspeed: {key}={value!r} ({what}) has no paraplan plan field; not imported"
            )
    for key in (
        "zero_optimization.offload_param.device",
        "zero_optimization.offload_optimizer.device",
    ):
        if flat.get(key) == "nvme":
            raise ExportRefused(
                f"deepspeed: {key}='nvme' has no paraplan plan field (host memory offload only)"
            )
    if seq_length is None:
        raise ExportRefused("deepspeed: the config has no sequence length; give --seq-length")
    micro = cfg.integer("train_micro_batch_size_per_gpu", 1, minimum=1)
    accum = cfg.integer("gradient_accumulation_steps", 1, minimum=1)
    batch = cfg.integer("train_batch_size", minimum=1)
    if batch % (micro * accum):
        raise ExportRefused(
            f"deepspeed: train_batch_size={batch} is not micro·accumulation·dp for integer dp"
        )
    dp = batch // (micro * accum)
    tp = cfg.doc("tensor_parallel", {}).integer("autotp_size", 0, minimum=0) or 1
    pp = cfg.doc("pipeline", {}).integer("stages", 1, minimum=1)
    zero = cfg.doc("zero_optimization", {})
    ckpt = cfg.doc("activation_checkpointing") if "activation_checkpointing" in cfg else None
    overlap = zero.boolean("overlap_comm", False)
    dtype = (
        "bf16"
        if cfg.doc("bf16", {}).boolean("enabled", False)
        else "fp16"
        if cfg.doc("fp16", {}).boolean("enabled", False)
        else "fp32"
    )
    return {
        "gpus": dp * tp * pp,
        "tp": tp,
        "pp": pp,
        "dp": dp,
        "cp": 1,
        "micro_batch": micro,
        "global_batch": batch,
        "seq_length": seq_length,
        "schedule": "1f1b",
        "recompute": "full" if ckpt is not None else "none",
        "zero": zero.choice("stage", (0, 1, 2, 3), 0),
        "dtype": dtype,
        "offload_weights": zero.doc("offload_param", {}).text("device", "none") != "none",
        "offload_optimizer": zero.doc("offload_optimizer", {}).text("device", "none") != "none",
        "offload_activations": bool(ckpt is not None and ckpt.boolean("cpu_checkpointing", False)),
        **_imported_grad_dtype(cfg, dtype),
        "overlap_dp_grad_reduce": overlap,
        "overlap_param_gather": overlap,
        "placement": "tp-cp-dp-pp",
        # given: DeepSpeed's cap on live ZeRO-3 parameters; absent, the plan keeps paraplan's default (two whole
        # layers) rather than DeepSpeed's 1e9 (state it with --zero3-max-live-params, or --framework deepspeed)
        "zero3_max_live_params": zero.number("stage3_max_live_parameters", None, minimum=1.0)
        if "stage3_max_live_parameters" in zero
        else None,
    }


def _imported_grad_dtype(cfg: Doc, dtype: str) -> dict:
    """The plan's grad_dtype: fp32 where the config states data_types.grad_accum_dtype fp32, else the model's
    2-byte dtype for a half-precision model (get_data_types' default under ZeRO; the BF16_Optimizer's fp32 of a
    bf16 model without ZeRO is the deepspeed profile's rule, step.constants.zero0_terms); an fp32 model keeps
    the plan's default."""
    stated = cfg.doc("data_types", {}).text("grad_accum_dtype", "")
    if stated:
        return {
            "grad_dtype": "fp32"
            if stated in ("fp32", "float32", "float", "torch.float32")
            else "bf16"
        }
    return {"grad_dtype": "bf16"} if dtype in ("bf16", "fp16") else {}
