"""torchtitan: a job-config TOML (``--job.config_file``).

Keys are those of torchtitan v0.2.2 ``torchtitan/config/job_config.py`` (kept in
``frameworks/torchtitan.yaml``). torchtitan shards with FSDP2 over the data-parallel shard and
context-parallel ranks together (its dense mesh is pp, dp_replicate, fsdp = dp_shard·cp, tp), so
ZeRO 3 is ``data_parallel_shard_degree`` with ``fsdp_reshard_after_forward = "default"``, ZeRO 2 the
same with ``"never"`` (gradients and optimizer state stay sharded, parameters stay gathered), ZeRO 0
plain replication; ZeRO 1 (optimizer state only) has no FSDP2 form. Its tensor parallelism always
shards the norm/dropout region along the sequence (sequence parallelism), and its CPU offload moves
parameters, gradients and optimizer state together.
"""

from __future__ import annotations

import json

from paraplan.export.common import (
    COMMON_FIELDS,
    ExportRefused,
    check_names,
    exportable,
    framework_args,
    header_lines,
    refuse,
    same_placement,
)
from paraplan.export.startup import refuse_failed_keys, startup_checks
from paraplan.export.torchtitan_split import (
    SPLIT_FIELDS,
    SPLIT_SWITCHES,
    model_parts,
    read_parts,
    split_given,
    writes_parts,
)
from paraplan.io.fields import Doc, as_list
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec
from paraplan.specs.recompute import OP_SAC, mode_of, plan_fields

NAME = "torchtitan"
ORDER = "tp-cp-dp-pp"
SCHEDULES = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "gpipe": "GPipe"}
FLOAT8 = "quantize.linear.float8"
HANDLED = COMMON_FIELDS | {"ep", "offload_weights", "offload_activations", "recompute_modules"}
HANDLED |= set(SPLIT_FIELDS) | set(SPLIT_SWITCHES)  # with --model: model parts (torchtitan_split)


def sections(plan: PlanSpec, model: ModelSpec | None = None) -> dict[str, dict[str, object]]:
    """{section: {field: value}}; refuses what torchtitan cannot run."""
    fw, c = exportable(plan, NAME, HANDLED)
    _check_mesh(plan, c, fw)
    _check_kernels_and_memory(plan, c, fw)
    if c["schedule"] == "interleaved" and plan.vpp == 1:
        raise refuse(fw, "schedule", "interleaved", "Interleaved1F1B needs vpp > 1 stages per rank")
    if plan.vpp > 1 and model is None:
        raise ExportRefused(
            "plan.vpp: torchtitan needs pipeline_parallel_layers_per_stage; give --model to compute it"
        )
    if plan.pp > 1 and model is None and split_given(plan):
        raise ExportRefused(
            "plan.stage_layers: torchtitan states a split as module_fqns_per_model_part; give --model "
            "to write it"
        )
    par: dict[str, object] = {
        "data_parallel_replicate_degree": plan.dp if c["zero"] == 0 else 1,
        "data_parallel_shard_degree": plan.dp if c["zero"] >= 2 else 1,
        "fsdp_reshard_after_forward": "never" if c["zero"] == 2 else "default",
        "tensor_parallel_degree": plan.tp,
        "enable_async_tensor_parallel": c["overlap_tp_comm"],
        "context_parallel_degree": plan.cp,
        "context_parallel_rotate_method": "alltoall",
        "pipeline_parallel_degree": plan.pp,
    }
    if plan.ep > 1:
        par["expert_parallel_degree"] = plan.ep
    training: dict[str, object] = {
        "global_batch_size": plan.global_batch,
        "seq_len": plan.seq_length,
    }
    if plan.pp > 1:
        if c["schedule"] not in SCHEDULES:
            raise refuse(fw, "schedule", c["schedule"], f"it writes only {', '.join(SCHEDULES)}")
        par["pipeline_parallel_schedule"] = SCHEDULES[c["schedule"]]
        par["pipeline_parallel_microbatch_size"] = plan.micro_batch
        par["pipeline_parallel_first_stage_less_layers"] = 0
        par["pipeline_parallel_last_stage_less_layers"] = 0
        if writes_parts(plan, model):  # any split but the even default (torchtitan_split)
            par["module_fqns_per_model_part"] = model_parts(plan, model)  # type: ignore[arg-type]
        elif model is not None:
            par["pipeline_parallel_layers_per_stage"] = model.layers // (plan.pp * plan.vpp)
        training["local_batch_size"] = plan.global_batch // plan.dp
    else:
        training["local_batch_size"] = plan.micro_batch
    training["mixed_precision_param"] = "float32" if plan.dtype == "fp32" else "bfloat16"
    training["enable_cpu_offload"] = plan.offload_weights
    out: dict[str, dict[str, object]] = {
        "parallelism": par,
        "training": training,
        "activation_checkpoint": activation_checkpoint(plan),
        "compile": {"enable": bool(c["overlap_tp_comm"] or plan.dtype == "fp8")},
    }
    if plan.dtype == "fp8":
        out["model"] = {"converters": [FLOAT8]}
    return out


def _check_mesh(plan: PlanSpec, c: dict, fw: str) -> None:
    """Refuse a placement or a sharding torchtitan's device mesh cannot run (``c``: the canonical
    plan)."""
    if not same_placement(plan, ORDER):
        raise refuse(
            fw,
            "placement",
            plan.placement,
            "torchtitan's mesh places tp innermost, then cp, dp, pp",
        )
    if plan.tp > 1 and not c["sequence_parallel"]:
        raise refuse(
            fw,
            "sequence_parallel",
            False,
            "torchtitan's tensor parallelism always shards norms along the sequence",
        )
    if c["zero"] == 1:
        raise refuse(fw, "zero", 1, "FSDP2 has no optimizer-state-only sharding (use zero 2 or 3)")
    if c["zero"] == 0 and plan.cp > 1:
        raise refuse(
            fw,
            "zero",
            0,
            "torchtitan shards parameters over the context-parallel ranks (FSDP over dp_shard·cp)",
        )


def activation_checkpoint(plan: PlanSpec) -> dict[str, str]:
    """torchtitan's [activation_checkpoint]: the plan's mode; per-op selective checkpointing (graph.ops.OP_SAC) is
    mode 'selective' with selective_ac_option 'op' (v0.2.2 torchtitan/distributed/activation_checkpoint.py:177, the
    policy of lines 109-116: every mm saved but every second one, as OP_SAC prices)."""
    if plan.recompute == "selective":
        return {"mode": "selective", "selective_ac_option": "op"}
    return {"mode": plan.recompute}


def _check_kernels_and_memory(plan: PlanSpec, c: dict, fw: str) -> None:
    """Refuse a recomputation, attention kernel, datatype, overlap or offload torchtitan cannot run."""
    if plan.recompute == "selective" and mode_of(plan.recompute, plan.recompute_modules) != OP_SAC:
        raise refuse(
            fw,
            "recompute",
            "selective",
            "torchtitan's selective checkpointing (per op or every n-th layer) is not "
            "Korthikanti et al.'s attention-core recomputation",
        )
    if plan.attention != "flash":
        raise refuse(
            fw, "attention", plan.attention, "torchtitan runs fused scaled-dot-product attention"
        )
    if plan.dtype == "fp16":
        raise refuse(fw, "dtype", "fp16", "mixed_precision_param allows bfloat16 or float32")
    if not c["overlap_dp_grad_reduce"]:
        raise refuse(
            fw,
            "overlap_dp_grad_reduce",
            False,
            "FSDP2/DDP always overlap the gradient reduction with backward",
        )
    if c["zero"] >= 2 and not c["overlap_param_gather"]:
        raise refuse(
            fw, "overlap_param_gather", False, "FSDP2 always prefetches the next parameters"
        )
    offloads = (plan.offload_weights, plan.offload_activations, plan.offload_optimizer)
    if any(offloads) and not (
        all(offloads[::2]) and not plan.offload_activations and c["zero"] == 3
    ):
        knob = (
            "offload_activations"
            if plan.offload_activations
            else "offload_weights"
            if not plan.offload_weights
            else "offload_optimizer"
        )
        raise refuse(
            fw,
            knob,
            getattr(plan, knob),
            "training.enable_cpu_offload moves weights and optimizer state "
            "together, with ZeRO 3, and never activations",
        )


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))  # a TOML basic string: quotes, backslashes, controls escaped


def export(plan: PlanSpec, model: ModelSpec | None = None, header: str = "") -> str:
    """The TOML text: one table per job-config section."""
    fw = framework_args(NAME)
    secs = sections(plan, model)
    given = {f"{s}.{k}": v for s, fields in secs.items() for k, v in fields.items()}
    check_names(fw, list(given))
    context = {"world_size": plan.gpus, "n_layers": model.layers if model is not None else None}
    context["model_parts"] = len(given.get("parallelism.module_fqns_per_model_part") or ()) or None
    refuse_failed_keys(NAME, fw.label, plan, given, context)
    lines = header_lines(
        header,
        f"# torchtitan job config; keys: {fw.label} torchtitan/config/job_config.py",
        f"# start-up checks: {len(startup_checks(NAME).checks)} from {fw.label} source pass",
    )
    for name, fields in secs.items():
        lines.append("")
        lines.append(f"[{name}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in fields.items()]
    return "\n".join(lines) + "\n"


def _read_job_config(text: str) -> Doc:
    """The job config's TOML; refuses a key torchtitan does not have."""
    import tomllib  # read back only: a search's launch targets write the config, ~4 ms of import spared

    fw = framework_args(NAME)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ExportRefused(f"torchtitan: not valid TOML: {exc}") from None
    for sec, fields in data.items():
        for key in fields if isinstance(fields, dict) else ():
            if f"{sec}.{key}" not in fw.names:
                raise ExportRefused(
                    f"torchtitan: {sec}.{key} is not a torchtitan {fw.version} job-config key"
                )
    return Doc(data, "torchtitan")


def _check_pipeline_importable(par: Doc, pp: int) -> None:
    """Refuse a pipeline split no plan field holds: first / last stages with fewer layers (torchtitan's
    default), a hand-made split or schedule."""
    if pp > 1 and (
        par.integer("pipeline_parallel_first_stage_less_layers", 1, minimum=0)
        or par.integer("pipeline_parallel_last_stage_less_layers", 1, minimum=0)
    ):
        raise ExportRefused(
            "torchtitan: first/last stage with fewer layers (pipeline_parallel_*_stage_less_layers, "
            "default 1) has no paraplan plan field; set both to 0"
        )
    if par.get("pipeline_parallel_schedule_csv", None):
        raise ExportRefused(
            "torchtitan: parallelism.pipeline_parallel_schedule_csv (a hand-made schedule) has no "
            "paraplan plan field"
        )


def read_activation_checkpoint(ac: Doc) -> dict[str, object]:
    """The plan's recompute fields of torchtitan's [activation_checkpoint] (activation_checkpoint(plan) read back):
    none, full, or per-op selective (selective_ac_option 'op'); layer SAC (its default '2') is refused."""
    mode = ac.text("mode", "selective")  # torchtitan's default
    if mode == "selective" and ac.text("selective_ac_option", "2") == "op":
        return plan_fields(OP_SAC)  # specs.recompute: selective with recompute_modules [op_sac]
    if mode not in ("none", "full"):
        raise ExportRefused(
            f"torchtitan: activation_checkpoint.mode {mode!r} has no paraplan recompute "
            "(none, full, or selective with selective_ac_option 'op')"
        )
    return {"recompute": mode}


def import_plan(text: str, model: ModelSpec | None = None) -> dict[str, object]:
    """PlanSpec fields from a torchtitan job-config TOML."""
    doc = _read_job_config(text)
    par, training = doc.doc("parallelism", {}), doc.doc("training", {})
    pp = par.integer("pipeline_parallel_degree", 1, minimum=1)
    _check_pipeline_importable(par, pp)
    replicate = par.integer("data_parallel_replicate_degree", 1, minimum=1)
    shard = par.integer("data_parallel_shard_degree", 1, minimum=1)
    if replicate > 1 and shard > 1:
        raise ExportRefused(
            "torchtitan: hybrid sharding (replicate and shard degrees both > 1) has no paraplan plan"
        )
    tp = par.integer("tensor_parallel_degree", 1, minimum=1)
    cp = par.integer("context_parallel_degree", 1, minimum=1)
    dp = replicate * shard
    if shard > 1 or (cp > 1 and replicate == 1):
        zero = 2 if par.get("fsdp_reshard_after_forward", None) == "never" else 3
    else:
        zero = 0
    schedule = par.choice(
        "pipeline_parallel_schedule", {v: k for k, v in SCHEDULES.items()}, "1F1B"
    )
    vpp, split = 1, {}
    parts = par.get("module_fqns_per_model_part", None)
    if parts and pp > 1:
        split = read_parts(parts, pp, model)  # its vpp among the split's fields
    elif parts:
        raise ExportRefused("torchtitan: module_fqns_per_model_part without pipeline stages")
    elif schedule == "interleaved":
        per_stage = par.integer("pipeline_parallel_layers_per_stage", 0, minimum=0)
        if model is None or not per_stage:
            raise ExportRefused(
                "torchtitan: an interleaved schedule needs --model and pipeline_parallel_layers_per_stage"
            )
        vpp = model.layers // (per_stage * pp)
    global_batch = training.integer("global_batch_size", -1)
    local = training.integer("local_batch_size", 8, minimum=1)
    if global_batch <= 0:
        global_batch = local * dp
    offload = training.boolean("enable_cpu_offload", False)
    recompute = read_activation_checkpoint(doc.doc("activation_checkpoint", {}))
    converters = as_list(doc.doc("model", {}).get("converters", []), "torchtitan.model.converters")
    return {
        "gpus": dp * tp * pp * cp,
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "dp": dp,
        "ep": par.integer("expert_parallel_degree", 1, minimum=1),
        "vpp": vpp,
        "schedule": schedule,
        "micro_batch": par.integer("pipeline_parallel_microbatch_size", 1, minimum=1)
        if pp > 1
        else local,
        "global_batch": global_batch,
        "seq_length": training.integer("seq_len", 2048, minimum=1),
        "sequence_parallel": tp > 1,
        **recompute,
        "zero": zero,
        "dtype": "fp8"
        if FLOAT8 in converters
        else "fp32"
        if training.get("mixed_precision_param", None) == "float32"
        else "bf16",
        "attention": "flash",
        "offload_weights": offload,
        "offload_optimizer": offload,
        "overlap_dp_grad_reduce": True,
        "overlap_param_gather": True,
        "overlap_tp_comm": par.boolean("enable_async_tensor_parallel", False),
        "placement": ORDER,
    } | split
