"""Megatron-LM / Megatron-Core: a ``torchrun ... pretrain_gpt.py --flag value ...`` launch line.

Argument names are those of Megatron-LM core_v0.14.0 ``megatron/training/arguments.py`` (kept in
``frameworks/megatron.yaml``). What Megatron-LM shares with NeMo (rank orders, ZeRO as the distributed
optimizer and Megatron FSDP, context-parallel communication types, the pipeline layout) is
export.megatron_core's.
"""

from __future__ import annotations

import shlex

from paraplan.export.common import (
    ExportRefused,
    check_names,
    exportable,
    framework_args,
    header_lines,
    nodes_and_gpus_per_node,
    refuse,
    require,
)
from paraplan.export.megatron_core import (
    LAYOUT_FLAG,
    MEGATRON_CORE_FIELDS,
    MEGATRON_EXPERT_FIELDS,
    ORDERS,
    SHARDING,
    cp_comm_type,
    cp_fields_from_cp_comm_type,
    distributed_optimizer,
    expert_fields,
    expert_knobs,
    fp8_primary_weights,
    megatron_core_checks,
    pipeline_layout,
    placement_of,
    recompute_modules_of,
    sharding_stages,
    stage_layers_from_layout,
)
from paraplan.export.megatron_model import model_arguments
from paraplan.export.startup import (
    argument_groups,
    launch_environment,
    refuse_failed,
    startup_checks,
)
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec

NAME = "megatron"
SCRIPT = "pretrain_gpt.py"
# Flags that change the plan in ways paraplan's PlanSpec cannot hold: refused on import, never ignored.
UNREPRESENTABLE = {
    "--use-torch-fsdp2": "PyTorch FSDP2 sharding",
    "--overlap-param-gather-with-optimizer-step": "parameter gather overlapped with the optimizer step",
    "--optimizer-offload-fraction": "partial optimizer offload",
    "--cpu-offloading": "activation/weight offload of chosen layers",
}
HANDLED = MEGATRON_CORE_FIELDS | MEGATRON_EXPERT_FIELDS
# a launch line is a few KiB; 128 KiB keeps shlex (quadratic in a token's length) under a second
# (issue 37: a 5 MB layout made import plan run past 60 s)
MAX_LAUNCH_CHARS = 128 * 1024
MULTI_VALUE_FLAGS = {"--recompute-modules"}  # flags that take a list (argparse nargs='*')
DTYPE_FLAGS = (("--fp8-format", "fp8"), ("--bf16", "bf16"), ("--fp16", "fp16"))  # the first given
SPLIT_FLAGS = {  # plan field -> Megatron-LM flag (specs/split.py states the same rules)
    "layers_first_stage": "--decoder-first-pipeline-num-layers",
    "layers_last_stage": "--decoder-last-pipeline-num-layers",
    "embedding_as_layer": "--account-for-embedding-in-pipeline-split",
    "loss_as_layer": "--account-for-loss-in-pipeline-split",
}


def plan_arguments(plan: PlanSpec, model: ModelSpec | None = None) -> list[str]:
    """The plan as Megatron-LM arguments (flag, value, flag, ...); refuses what Megatron cannot run. With the model, an
    interleaved split whose stages do not cut into equal chunks is written as a pipeline layout (split_arguments)."""
    fw = exportable(plan, NAME, HANDLED)[0]
    recompute_modules_of(plan, fw)  # refuses a module Megatron-Core does not have
    c, mapping = megatron_core_checks(
        plan, fw, "Megatron", "--num-virtual-stages-per-pipeline-rank", "--optimizer-cpu-offload"
    )
    if c["overlap_tp_comm"] and not c["sequence_parallel"]:
        raise refuse(fw, "overlap_tp_comm", True, "--tp-comm-overlap needs --sequence-parallel")
    a: list[str] = [
        "--tensor-model-parallel-size",
        str(plan.tp),
        "--pipeline-model-parallel-size",
        str(plan.pp),
        "--context-parallel-size",
        str(plan.cp),
    ]
    a += expert_arguments(plan, fw, model is not None and model.experts > 0)
    if plan.vpp > 1:
        a += ["--num-virtual-stages-per-pipeline-rank", str(plan.vpp)]
    if ORDERS[mapping[0]]:
        a += ["--use-tp-pp-dp-mapping"]
    a += split_arguments(plan, fw, model)
    a += [
        "--micro-batch-size",
        str(plan.micro_batch),
        "--global-batch-size",
        str(plan.global_batch),
    ]
    a += ["--seq-length", str(plan.seq_length)]
    if c["sequence_parallel"]:
        a += ["--sequence-parallel"]
    a += recompute_arguments(plan) + optimizer_arguments(plan, c)
    if c["overlap_tp_comm"]:
        a += ["--tp-comm-overlap"]
    a += {
        "bf16": ["--bf16"],
        "fp16": ["--fp16"],
        "fp8": ["--bf16", "--fp8-format", "hybrid"],
        "fp32": [],
    }[plan.dtype]
    if fp8_primary_weights(plan):  # fp8 weights, gathered in fp8 (no cached copies)
        a += ["--fp8-param-gather"]
    if plan.grad_dtype == "bf16":  # default: fp32 main grads (arguments.py lines 662-665)
        a += ["--grad-reduce-in-bf16"]
    a += ["--attention-backend", plan.attention]
    if cp_comm_type(plan):
        a += ["--cp-comm-type", cp_comm_type(plan)]
    return a


def recompute_arguments(plan: PlanSpec) -> list[str]:
    """Recomputation: selective (with Megatron-Core's module names, which the plan field uses; default
    core_attn), full of the first N layers of each chunk (block), or full of every layer (uniform, 1)."""
    if plan.recompute == "selective":
        modules = ["--recompute-modules", *plan.recompute_modules] if plan.recompute_modules else []
        return ["--recompute-granularity", "selective", *modules]
    if plan.recompute != "full":
        return []
    block = plan.recompute_num_layers is not None
    return [
        "--recompute-granularity",
        "full",
        "--recompute-method",
        "block" if block else "uniform",
        "--recompute-num-layers",
        str(plan.recompute_num_layers) if block else "1",
    ]


def optimizer_arguments(plan: PlanSpec, c: dict) -> list[str]:
    """ZeRO as the distributed optimizer (1) and Megatron FSDP (2, 3), the optimizer offload, and the
    gradient-reduce and parameter-gather overlaps (``c``: the canonical plan)."""
    a: list[str] = []
    if distributed_optimizer(plan, c["zero"]):
        a += ["--use-distributed-optimizer"]
    if c["zero"] >= 2:  # Megatron FSDP saves only fsdp_dtensor checkpoints (start-up check)
        a += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", SHARDING[c["zero"]]]
        a += ["--ckpt-format", "fsdp_dtensor"]
    if plan.offload_optimizer:  # the hybrid-device optimizer runs on the precision-aware path
        a += ["--optimizer-cpu-offload", "--use-precision-aware-optimizer"]
    if c["overlap_dp_grad_reduce"]:
        a += ["--overlap-grad-reduce"]
    if c["zero"] >= 1 and c["overlap_param_gather"]:
        a += ["--overlap-param-gather"]
    return a


def expert_arguments(plan: PlanSpec, fw: str, moe: bool = False) -> list[str]:
    """The expert layers' arguments: the expert parallel size, then megatron_core.expert_knobs as flags
    (a switch alone, a value after its flag). Refuses the pipeline schedules Megatron-LM does not run and
    the hybridep dispatcher (no flex backend flag at core_v0.14.0)."""
    if plan.pipeline_schedule in ("zb-h1", "dualpipe"):
        raise refuse(
            fw,
            "schedule",
            plan.pipeline_schedule,
            "Megatron-LM runs 1F1B or interleaved 1F1B pipelines",
        )
    if plan.moe_dispatcher == "hybridep":
        why = "core_v0.14.0 has no --moe-flex-dispatcher-backend (Hybrid-EP is later: Megatron-LM 0d8e0714)"
        raise refuse(fw, "moe_dispatcher", "hybridep", why)
    a = ["--expert-model-parallel-size", str(plan.ep)] if plan.ep > 1 else []
    for flag, value in expert_knobs(plan, moe):
        a += [flag] if value is True else [flag, str(value)]
    return a


def split_arguments(plan: PlanSpec, fw: str, model: ModelSpec | None = None) -> list[str]:
    """The plan's stage split: first/last stage counts and embedding/loss as layers, or a layout for explicit stage
    counts and, with the model, for an interleaved split whose stages do not cut into equal chunks
    (specs.plan.interleave_split_rule; the layout replaces the split flags, which Megatron-LM would refuse with vpp)."""
    if (layout := pipeline_layout(plan, model)) is not None:
        return [LAYOUT_FLAG, layout]
    a: list[str] = []
    for name, flag in SPLIT_FLAGS.items():
        value = getattr(plan, name)
        if value is True:
            a.append(flag)
        elif value is not None and value is not False:
            a += [flag, str(value)]
    return a


def export(
    plan: PlanSpec, model: ModelSpec | None = None, gpus_per_node: int = 8, header: str = ""
) -> str:
    """A runnable launch line: torchrun with whole nodes, then the script and its arguments."""
    fw = framework_args(NAME)
    args = plan_arguments(plan, model)
    args += model_arguments(model, plan.seq_length) if model is not None else []
    check_names(fw, [t for t in args if t.startswith("--")])
    env = launch_environment(NAME, args)  # the facts' environment entries
    refuse_failed(NAME, fw.label, plan, args, env)
    nodes, per_node = nodes_and_gpus_per_node(plan.gpus, gpus_per_node)
    out = header_lines(header, f"# argument names: {fw.label}, {fw.source.split(' (')[0]}")
    out.append(f"# start-up checks: {len(startup_checks(NAME).checks)} from {fw.label} source pass")
    out += [f"export {k}={v}" for k, v in env.items()]
    launch = f"torchrun --nnodes {nodes} --nproc-per-node {per_node} {SCRIPT}"
    # a flag and the values after it (several for MULTI_VALUE_FLAGS) on one line
    pairs = [" ".join([flag, *map(shlex.quote, values)]) for flag, values in argument_groups(args)]
    out.append(" \\\n    ".join([launch] + pairs))
    return "\n".join(out) + "\n"


def parse(text: str) -> dict[str, object]:
    """Flags of a launch line (comments and line continuations allowed): {flag: value or True, or a tuple of values for
    MULTI_VALUE_FLAGS}."""
    if len(text) > MAX_LAUNCH_CHARS:  # shlex reads a token in time quadratic in its length
        raise ExportRefused(
            f"megatron: the launch line is {len(text)} characters; allowed: at most {MAX_LAUNCH_CHARS}"
        )
    body = " ".join(line.split("#", 1)[0] for line in text.replace("\\\n", " ").splitlines())
    try:
        tokens = shlex.split(body)
    except ValueError as exc:  # an unbalanced quote: one line naming it, not an internal error
        raise ExportRefused(
            f"megatron: the launch line is not valid shell ({exc}); allowed: a line that bash reads,"
            " quotes balanced"
        ) from None
    flags: dict[str, object] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("--"):
            key, eq, val = tok.partition("=")
            if eq:
                flags[key] = val
            elif key in MULTI_VALUE_FLAGS:  # every value up to the next flag, as a tuple
                values = []
                while (
                    i + 1 < len(tokens)
                    and not tokens[i + 1].startswith("--")
                    and not tokens[i + 1].endswith(".py")
                ):
                    values.append(tokens[i + 1])
                    i += 1
                flags[key] = tuple(values)
            elif (
                i + 1 < len(tokens)
                and not tokens[i + 1].startswith("--")
                and not tokens[i + 1].endswith(".py")
            ):
                flags[key] = tokens[i + 1]
                i += 1
            else:
                flags[key] = True
        i += 1
    return flags


def import_plan(text: str) -> dict[str, object]:
    """PlanSpec fields from a Megatron-LM launch line (torchrun's --nnodes and --nproc-per-node give gpus)."""
    f = parse(text)
    _check_importable(f)

    def num(flag: str, default: int) -> int:
        value = f.get(flag, default)
        try:
            return int(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ExportRefused(f"megatron: {flag} {value!r} is not an integer") from None

    per_node = num("--nproc-per-node", num("--nproc_per_node", 1))
    granularity = f.get("--recompute-granularity")
    zero = 1 if "--use-distributed-optimizer" in f else 0
    if "--use-megatron-fsdp" in f:
        zero = sharding_stages(zero)[str(f.get("--data-parallel-sharding-strategy", "no_shard"))]
    dtype = next((d for flag, d in DTYPE_FLAGS if flag in f), "fp32")
    split, vpp = _split_fields(f, num)
    return {
        "gpus": num("--nnodes", 1) * per_node,
        "tp": num("--tensor-model-parallel-size", 1),
        "pp": num("--pipeline-model-parallel-size", 1),
        "cp": num("--context-parallel-size", 1),
        "ep": num("--expert-model-parallel-size", 1),
        "vpp": vpp,
        "schedule": "interleaved" if vpp > 1 else "1f1b",
        "micro_batch": num("--micro-batch-size", 1),
        "global_batch": num("--global-batch-size", 1),
        "seq_length": num("--seq-length", 1),
        "sequence_parallel": "--sequence-parallel" in f,
        "recompute": granularity if granularity in ("full", "selective") else "none",
        "recompute_num_layers": (
            num("--recompute-num-layers", 1)
            if granularity == "full" and f.get("--recompute-method", "uniform") == "block"
            else None
        ),
        **(
            {"recompute_modules": tuple(f["--recompute-modules"])}
            if granularity == "selective" and f.get("--recompute-modules")
            else {}
        ),
        "zero": zero,
        "dtype": dtype,
        "fp8_weight_copies": dtype == "fp8" and "--fp8-param-gather" not in f,
        "grad_dtype": "bf16" if "--grad-reduce-in-bf16" in f else "fp32",
        "attention": "unfused" if f.get("--attention-backend") == "unfused" else "flash",
        "offload_optimizer": "--optimizer-cpu-offload" in f,
        "overlap_dp_grad_reduce": "--overlap-grad-reduce" in f,
        "overlap_param_gather": "--overlap-param-gather" in f or zero == 0,
        "overlap_tp_comm": "--tp-comm-overlap" in f,
        "placement": placement_of("--use-tp-pp-dp-mapping" in f),
        **cp_fields_from_cp_comm_type(
            f.get("--cp-comm-type"), num("--context-parallel-size", 1), "megatron: --cp-comm-type"
        ),
        **expert_fields(
            f.get,
            num("--expert-tensor-parallel-size", 1),
            "megatron: --moe-token-dispatcher-type",
            "--moe-enable-deepep",
        ),
        **split,
    }


def _check_importable(f: dict) -> None:
    """Refuse a launch line with a flag Megatron-LM does not have, one whose effect no plan field holds
    (UNREPRESENTABLE, recomputation other than block or every layer, modules without selective
    recomputation), or without what the plan is rebuilt from."""
    known = framework_args(NAME).names | {"--nnodes", "--nproc-per-node", "--nproc_per_node"}
    unknown = sorted(k for k in f if k not in known)
    if unknown:
        raise ExportRefused(
            f"megatron: {unknown[0]!r} is not a Megatron-LM {framework_args(NAME).version} argument"
        )
    for flag, what in UNREPRESENTABLE.items():
        if flag in f:
            raise ExportRefused(
                f"megatron: {flag} ({what}) has no paraplan plan field; not imported"
            )
    method = f.get("--recompute-method", "uniform")
    if (
        f.get("--recompute-granularity") == "full"
        and method != "block"
        and (method != "uniform" or str(f.get("--recompute-num-layers", "1")) != "1")
    ):
        raise ExportRefused(
            "megatron: full recomputation other than --recompute-method block or uniform with "
            "--recompute-num-layers 1 (every layer) has no paraplan plan field"
        )
    if "--recompute-modules" in f and f.get("--recompute-granularity") != "selective":
        raise ExportRefused(
            "megatron: --recompute-modules without --recompute-granularity selective recomputes nothing "
            "in Megatron-LM; paraplan's recompute_modules needs recompute=selective"
        )
    require(f, ("--nnodes", "--global-batch-size", "--seq-length"), "megatron: ")


def _split_fields(f: dict, num) -> tuple[dict[str, object], int]:
    """(the split's plan fields, vpp): a pipeline layout, the first / last stage flags, and vpp from
    --num-virtual-stages-per-pipeline-rank, the layout or --num-layers-per-virtual-pipeline-stage."""
    vpp = num("--num-virtual-stages-per-pipeline-rank", 1)
    split: dict[str, object] = {}
    if LAYOUT_FLAG in f:
        split["stage_layers"], vpp = stage_layers_from_layout(
            str(f[LAYOUT_FLAG]), num("--pipeline-model-parallel-size", 1)
        )
    for name, flag in SPLIT_FLAGS.items():
        if flag in f:
            split[name] = True if name.endswith("_as_layer") else num(flag, 0)
    if "--num-layers-per-virtual-pipeline-stage" in f:
        if "--num-layers" not in f:
            raise ExportRefused(
                "megatron: --num-layers-per-virtual-pipeline-stage needs --num-layers to give vpp"
            )
        vpp = num("--num-layers", 1) // (
            num("--num-layers-per-virtual-pipeline-stage", 1)
            * num("--pipeline-model-parallel-size", 1)
        )
    return split, vpp
