"""Megatron-LM / Megatron-Core: a ``torchrun ... pretrain_gpt.py --flag value ...`` launch line.

Argument names are those of Megatron-LM core_v0.14.0 ``megatron/training/arguments.py`` (kept in
``frameworks/megatron.yaml``). ZeRO stages map to the distributed optimizer (1) and Megatron FSDP's
sharding strategies ``optim_grads`` (2) and ``optim_grads_params`` (3). Megatron's rank order is
tp-cp-ep-dp-pp, or tp-cp-ep-pp-dp with ``--use-tp-pp-dp-mapping`` (megatron/training/initialize.py).
"""

from __future__ import annotations

import re
import shlex

from paraplan.export.common import (
    ExportRefused,
    canonical_plan,
    check_handled,
    check_names,
    framework_args,
    nodes_and_gpus_per_node,
    refuse,
    same_placement,
)
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec
from paraplan.specs.rules import interleave_split_rule
from paraplan.specs.split import accounted_units, chunk_layer_counts, stage_layer_counts

NAME = "megatron"
SCRIPT = "pretrain_gpt.py"
ORDERS = {"tp-cp-dp-pp": False, "tp-cp-pp-dp": True}  # placement -> --use-tp-pp-dp-mapping
SHARDING = {2: "optim_grads", 3: "optim_grads_params"}
# Flags that change the plan in ways paraplan's PlanSpec cannot hold: refused on import, never ignored.
UNREPRESENTABLE = {
    "--use-torch-fsdp2": "PyTorch FSDP2 sharding",
    "--overlap-param-gather-with-optimizer-step": "parameter gather overlapped with the optimizer step",
    "--optimizer-offload-fraction": "partial optimizer offload",
    "--cpu-offloading": "activation/weight offload of chosen layers",
}
HANDLED = {
    "gpus",
    "tp",
    "pp",
    "dp",
    "cp",
    "vpp",
    "ep",
    "micro_batch",
    "global_batch",
    "seq_length",
    "sequence_parallel",
    "recompute",
    "recompute_num_layers",
    "zero",
    "dtype",
    "attention",
    "schedule",
    "offload_optimizer",
    "overlap_dp_grad_reduce",
    "overlap_param_gather",
    "overlap_tp_comm",
    "placement",
    "stage_layers",
    "layers_first_stage",
    "layers_last_stage",
    "embedding_as_layer",
    "loss_as_layer",
    "tp_layout",
    "cp_algorithm",
    "etp",
    "moe_dispatcher",
    "moe_a2a_overlap",
    "capacity_factor",
    "moe_balance",
    "recompute_modules",
}
MULTI_VALUE_FLAGS = {"--recompute-modules"}  # flags that take a list (argparse nargs='*')
# plan.moe_dispatcher -> Megatron-Core's token dispatcher arguments (megatron/training/arguments.py,
# core_v0.14.0: --moe-token-dispatcher-type {allgather, alltoall, flex}; DeepEP is flex + --moe-enable-deepep)
DISPATCHER_ARGS = {
    "alltoall": ["--moe-token-dispatcher-type", "alltoall"],
    "allgather": ["--moe-token-dispatcher-type", "allgather"],
    "deepep": ["--moe-token-dispatcher-type", "flex", "--moe-enable-deepep"],
}
SPLIT_FLAGS = {  # plan field -> Megatron-LM flag (specs/split.py states the same rules)
    "layers_first_stage": "--decoder-first-pipeline-num-layers",
    "layers_last_stage": "--decoder-last-pipeline-num-layers",
    "embedding_as_layer": "--account-for-embedding-in-pipeline-split",
    "loss_as_layer": "--account-for-loss-in-pipeline-split",
}
LAYOUT_FLAG = "--pipeline-model-parallel-layout"


def megatron_core_checks(
    plan: PlanSpec, fw: str, who: str, vpp_name: str, offload_name: str
) -> tuple[dict, list[str]]:
    """Refusals shared by every Megatron-Core front end (Megatron-LM, NeMo): its two rank orders,
    no GPipe, interleaving only with vpp > 1, optimizer offload only with the distributed
    optimizer. Returns (canonical plan, matching rank orders)."""
    c = canonical_plan(plan)
    mapping = [order for order in ORDERS if same_placement(plan, order)]
    if not mapping:
        raise refuse(
            fw,
            "placement",
            plan.placement,
            f"{who} orders ranks tp-cp-ep-dp-pp or tp-cp-ep-pp-dp only",
        )
    if c["schedule"] == "gpipe":
        raise refuse(fw, "schedule", "gpipe", f"{who} runs 1F1B or interleaved 1F1B pipelines")
    if c["schedule"] == "interleaved" and plan.vpp == 1:
        raise refuse(fw, "schedule", "interleaved", f"interleaving needs vpp > 1 ({vpp_name})")
    if plan.offload_optimizer and c["zero"] == 0:
        raise refuse(
            fw,
            "offload_optimizer",
            True,
            f"{offload_name} needs the distributed optimizer (zero >= 1)",
        )
    if plan.tp_layout == "2d":
        raise refuse(
            fw, "tp_layout", "2d", f"{who} runs 1D tensor parallelism only (no SUMMA grid)"
        )
    return c, mapping


# Megatron-Core TransformerConfig.cp_comm_type (megatron/core/transformer/transformer_config.py): "p2p" passes K/V
# chunks around a ring (overlapped with attention), "all_gather" gathers the whole sequence's K/V before attention
# (not overlapped) — paraplan's tp_layout 2d-seq; "a2a" all-to-all over the heads (DeepSpeed-Ulysses style) —
# paraplan's cp_algorithm 'all-to-all'; "a2a+p2p" (hierarchical) has no plan field.
# cp_comm_type -> (tp_layout, cp_algorithm)
CP_COMM_TYPES = {
    "p2p": ("1d", "ring"),
    "all_gather": ("2d-seq", "ring"),
    "allgather": ("2d-seq", "ring"),  # help: allgather
    "a2a": ("1d", "all-to-all"),
}


def cp_comm_type(plan: PlanSpec) -> str | None:
    """Megatron-Core's cp_comm_type for the plan: "all_gather" for 2d-seq, "a2a" for Ulysses all-to-all,
    None (the default p2p ring) otherwise."""
    if plan.tp_layout == "2d-seq":
        return "all_gather"
    return "a2a" if plan.cp > 1 and plan.cp_algorithm == "all-to-all" else None


def cp_fields_from_cp_comm_type(value: object, cp: int, where: str) -> dict[str, str]:
    """The plan's tp_layout and cp_algorithm from a cp_comm_type (a string, or one per layer that must agree)."""
    values = value if isinstance(value, (list, tuple)) else [value]
    kinds = {str(v) for v in values if v is not None}
    if len(kinds) > 1:
        raise ExportRefused(
            f"{where} {sorted(kinds)}: one communication type per layer has no paraplan plan field"
        )
    kind = kinds.pop() if kinds else "p2p"
    if kind not in CP_COMM_TYPES:
        raise ExportRefused(
            f"{where} {kind!r} (hierarchical all-to-all context parallelism) has no paraplan plan field; not imported"
        )
    layout, algorithm = CP_COMM_TYPES[kind] if cp > 1 else ("1d", "ring")
    return {"tp_layout": layout, "cp_algorithm": algorithm}


def plan_arguments(plan: PlanSpec, model: ModelSpec | None = None) -> list[str]:
    """The plan as Megatron-LM arguments (flag, value, flag, ...); refuses what Megatron cannot run. With the model, an
    interleaved split whose stages do not cut into equal chunks is written as a pipeline layout (split_arguments)."""
    fw = framework_args(NAME).label
    check_handled(plan, HANDLED, fw)
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
    a += expert_arguments(plan, fw)
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
    if plan.recompute == "selective":
        a += ["--recompute-granularity", "selective"]
        if (
            plan.recompute_modules
        ):  # Megatron-Core's module names, which the plan field uses (default: core_attn)
            a += ["--recompute-modules", *plan.recompute_modules]
    elif (
        plan.recompute == "full" and plan.recompute_num_layers is not None
    ):  # the first N layers of each chunk
        a += [
            "--recompute-granularity",
            "full",
            "--recompute-method",
            "block",
            "--recompute-num-layers",
            str(plan.recompute_num_layers),
        ]
    elif plan.recompute == "full":
        a += [
            "--recompute-granularity",
            "full",
            "--recompute-method",
            "uniform",
            "--recompute-num-layers",
            "1",
        ]
    if c["zero"] >= 1:
        a += ["--use-distributed-optimizer"]
    if c["zero"] >= 2:
        a += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", SHARDING[c["zero"]]]
    if plan.offload_optimizer:
        a += ["--optimizer-cpu-offload"]
    if c["overlap_dp_grad_reduce"]:
        a += ["--overlap-grad-reduce"]
    if c["zero"] >= 1 and c["overlap_param_gather"]:
        a += ["--overlap-param-gather"]
    if c["overlap_tp_comm"]:
        a += ["--tp-comm-overlap"]
    a += {
        "bf16": ["--bf16"],
        "fp16": ["--fp16"],
        "fp8": ["--bf16", "--fp8-format", "hybrid"],
        "fp32": [],
    }[plan.dtype]
    a += ["--attention-backend", plan.attention]
    if cp_comm_type(plan):
        a += ["--cp-comm-type", cp_comm_type(plan)]
    return a


def expert_arguments(plan: PlanSpec, fw: str) -> list[str]:
    """The expert layers' arguments (Megatron-Core v0.14 names): expert parallel and expert tensor parallel
    sizes (stated whenever experts are split: Megatron's etp defaults to tp), the dispatcher, batch-level
    EP all-to-all overlap (--overlap-moe-expert-parallel-comm, new in v0.14), capacity and padding,
    forced balance (--moe-router-force-load-balancing, Megatron's benchmarking switch)."""
    if plan.pipeline_schedule in ("zb-h1", "dualpipe"):
        raise refuse(
            fw,
            "schedule",
            plan.pipeline_schedule,
            "Megatron-LM runs 1F1B or interleaved 1F1B pipelines",
        )
    a: list[str] = []
    experts_split = plan.ep * plan.etp > 1
    if plan.ep > 1:
        a += ["--expert-model-parallel-size", str(plan.ep)]
    if experts_split:
        a += ["--expert-tensor-parallel-size", str(plan.etp)]
    if experts_split or plan.moe_dispatcher != "alltoall":
        a += DISPATCHER_ARGS[plan.moe_dispatcher]
    if plan.moe_a2a_overlap:
        a += ["--overlap-moe-expert-parallel-comm"]
    if plan.capacity_factor is not None:
        a += [
            "--moe-expert-capacity-factor",
            repr(float(plan.capacity_factor)),
            "--moe-pad-expert-input-to-capacity",
        ]
    if plan.moe_balance == "forced":
        a += ["--moe-router-force-load-balancing"]
    return a


def expert_fields(f: dict, num) -> dict:
    """expert_arguments read back; without --expert-tensor-parallel-size etp is 1 (a file that relies on
    Megatron's default etp = tp for an MoE model must state it)."""
    dispatcher = {"alltoall": "alltoall", "allgather": "allgather", "flex": "deepep"}.get(
        str(f.get("--moe-token-dispatcher-type", "alltoall"))
    )
    if dispatcher is None:
        raise ExportRefused(
            f"megatron: --moe-token-dispatcher-type {f.get('--moe-token-dispatcher-type')!r} has no plan field"
        )
    if dispatcher == "deepep" and "--moe-enable-deepep" not in f:
        raise ExportRefused(
            "megatron: --moe-token-dispatcher-type flex without --moe-enable-deepep has no plan field"
        )
    capacity = f.get("--moe-expert-capacity-factor")
    return {
        "etp": num("--expert-tensor-parallel-size", 1),
        "moe_dispatcher": dispatcher,
        "moe_a2a_overlap": "--overlap-moe-expert-parallel-comm" in f,
        "capacity_factor": float(capacity) if capacity is not None else None,
        "moe_balance": "forced" if "--moe-router-force-load-balancing" in f else "learned",
    }


def layout_from_stage_layers(
    stage_layers: tuple[int, ...],
    vpp: int,
    embedding_units: int = 0,
    loss_units: int = 0,
    mtp_layers: int = 0,
) -> str:
    """Megatron-LM's layout string: pp·vpp chunks in model order (chunk v of stage s at position v·pp + s, as
    Megatron-Core's PipelineParallelLayerLayout reads it), 'E' first, 't*n' decoder layers (each stage's over its chunks
    by specs.split.chunk_layer_counts), the MTP modules 'm' and the loss 'L' last (the layout wants every 'm' in the
    last chunk of its rank, after the decoder layers)."""
    pp = len(stage_layers)
    counts = chunk_layer_counts(list(stage_layers), vpp, embedding_units, loss_units)
    chunks = []
    for v in range(vpp):
        for s, layers in enumerate(counts):
            text = ("E" if (s, v) == (0, 0) else "") + (f"t*{layers[v]}" if layers[v] else "")
            chunks.append(text + ("m" * mtp_layers + "L" if (s, v) == (pp - 1, vpp - 1) else ""))
    return "|".join(chunks)


def stage_layers_from_layout(layout: str, pp: int) -> tuple[tuple[int, ...], int]:
    """(decoder layers per stage, vpp) from a layout string, its chunks even or not; refuses what a plan cannot hold
    (MTP modules 'm' anywhere but beside the loss, where paraplan places them)."""
    text = layout.replace(",", "")
    text = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    text = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    chunks = text.split("|")
    if len(chunks) % pp:
        raise ExportRefused(
            f"megatron: {LAYOUT_FLAG} has {len(chunks)} chunks, not a multiple of pp={pp}"
        )
    vpp = len(chunks) // pp
    if set(text) - set("EtmL|"):
        raise ExportRefused(
            f"megatron: {LAYOUT_FLAG} {layout!r} holds layers other than E, t, m, L; no plan field"
        )
    if not (
        chunks[0].startswith("E")
        and chunks[-1].endswith("L")
        and text.count("E") == 1
        and text.count("L") == 1
    ):
        raise ExportRefused(
            f"megatron: {LAYOUT_FLAG} {layout!r} must start with E and end with L; no plan field otherwise"
        )
    mtp = text.count("m")
    if mtp and (chunks[-1].count("m") != mtp or not chunks[-1].endswith("m" * mtp + "L")):
        raise ExportRefused(
            f"megatron: {LAYOUT_FLAG} {layout!r} places MTP modules away from the loss; no plan field"
        )
    return tuple(sum(chunks[v * pp + s].count("t") for v in range(vpp)) for s in range(pp)), vpp


def split_arguments(plan: PlanSpec, fw: str, model: ModelSpec | None = None) -> list[str]:
    """The plan's stage split: first/last stage counts and embedding/loss as layers, or a layout for explicit stage
    counts and, with the model, for an interleaved split whose stages do not cut into equal chunks
    (specs.plan.interleave_split_rule; the layout replaces the split flags, which Megatron-LM would refuse with vpp)."""
    mtp = model.mtp_layers if model is not None else 0
    units = accounted_units(plan.embedding_units, plan.loss_units, mtp)
    stages = plan.stage_layers
    if stages is None and plan.vpp > 1 and model is not None:
        groups = plan.split(model.layers, mtp)
        if interleave_split_rule(groups, plan.vpp, *units):
            stages = tuple(stage_layer_counts(groups))
    if stages is not None:
        return [LAYOUT_FLAG, layout_from_stage_layers(stages, plan.vpp, *units, mtp_layers=mtp)]
    a: list[str] = []
    for name, flag in SPLIT_FLAGS.items():
        value = getattr(plan, name)
        if value is True:
            a.append(flag)
        elif value is not None and value is not False:
            a += [flag, str(value)]
    return a


def model_arguments(model: ModelSpec) -> list[str]:
    """The model's shape as Megatron-LM arguments (so the launch line trains the planned model)."""
    a = [
        "--num-layers",
        str(model.layers),
        "--hidden-size",
        str(model.hidden),
        "--ffn-hidden-size",
        str(model.ffn_hidden),
        "--num-attention-heads",
        str(model.heads),
        "--kv-channels",
        str(model.d_head),
        "--vocab-size",
        str(model.vocab),
    ]
    if model.n_kv_heads != model.heads:
        a += ["--group-query-attention", "--num-query-groups", str(model.n_kv_heads)]
    if model.mlp == "swiglu":
        a += ["--swiglu"]
    a += ["--normalization", "RMSNorm" if model.norm == "rmsnorm" else "LayerNorm"]
    if not model.tie_embeddings:
        a += ["--untie-embeddings-and-output-weights"]
    if model.learned_positions:
        a += [
            "--position-embedding-type",
            "learned_absolute",
            "--max-position-embeddings",
            str(model.max_position),
        ]
    else:
        a += ["--position-embedding-type", "rope"]
    if not model.has_bias:
        a += ["--disable-bias-linear"]
    if not model.has_dropout:
        a += ["--attention-dropout", "0", "--hidden-dropout", "0"]
    return a


def export(
    plan: PlanSpec, model: ModelSpec | None = None, gpus_per_node: int = 8, header: str = ""
) -> str:
    """A runnable launch line: torchrun with whole nodes, then the script and its arguments."""
    fw = framework_args(NAME)
    args = plan_arguments(plan, model) + (model_arguments(model) if model is not None else [])
    check_names(fw, [t for t in args if t.startswith("--")])
    nodes, per_node = nodes_and_gpus_per_node(plan.gpus, gpus_per_node)
    lines = [
        f"# {header}" if header else None,
        f"# argument names: {fw.label}, {fw.source.split(' (')[0]}",
    ]
    out = [ln for ln in lines if ln]
    launch = f"torchrun --nnodes {nodes} --nproc-per-node {per_node} {SCRIPT}"
    pairs: list[str] = []
    i = 0
    while i < len(
        args
    ):  # a flag and the values after it (several for MULTI_VALUE_FLAGS) on one line
        j = i + 1
        while j < len(args) and not args[j].startswith("--"):
            j += 1
        pairs.append(" ".join([args[i], *map(shlex.quote, args[i + 1 : j])]))
        i = j
    out.append(" \\\n    ".join([launch] + pairs))
    return "\n".join(out) + "\n"


def parse(text: str) -> dict[str, object]:
    """Flags of a launch line (comments and line continuations allowed): {flag: value or True, or a tuple of values for
    MULTI_VALUE_FLAGS}."""
    body = " ".join(line.split("#", 1)[0] for line in text.replace("\\\n", " ").splitlines())
    tokens = shlex.split(body)
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
    known = framework_args(NAME).names | {"--nnodes", "--nproc-per-node", "--nproc_per_node"}
    unknown = sorted(k for k in f if k not in known)
    if unknown:
        raise ExportRefused(
            f"megatron: {unknown[0]!r} is not a Megatron-LM {framework_args(NAME).version} argument"
        )

    def num(flag: str, default: int) -> int:
        value = f.get(flag, default)
        try:
            return int(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ExportRefused(f"megatron: {flag} {value!r} is not an integer") from None

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
    for needed in ("--nnodes", "--global-batch-size", "--seq-length"):
        if needed not in f:
            raise ExportRefused(
                f"megatron: {needed} is missing; paraplan needs it to rebuild the plan"
            )
    per_node = num("--nproc-per-node", num("--nproc_per_node", 1))
    granularity = f.get("--recompute-granularity")
    strategy = f.get("--data-parallel-sharding-strategy", "no_shard")
    zero = 0
    if "--use-distributed-optimizer" in f:
        zero = 1
    if "--use-megatron-fsdp" in f:
        zero = {"no_shard": zero, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}[
            str(strategy)
        ]
    dtype = (
        "fp8"
        if "--fp8-format" in f
        else "bf16"
        if "--bf16" in f
        else "fp16"
        if "--fp16" in f
        else "fp32"
    )
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
    fields: dict[str, object] = {
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
            if granularity == "full" and method == "block"
            else None
        ),
        **(
            {"recompute_modules": tuple(f["--recompute-modules"])}
            if granularity == "selective" and f.get("--recompute-modules")
            else {}
        ),
        "zero": zero,
        "dtype": dtype,
        "attention": "unfused" if f.get("--attention-backend") == "unfused" else "flash",
        "offload_optimizer": "--optimizer-cpu-offload" in f,
        "overlap_dp_grad_reduce": "--overlap-grad-reduce" in f,
        "overlap_param_gather": "--overlap-param-gather" in f or zero == 0,
        "overlap_tp_comm": "--tp-comm-overlap" in f,
        "placement": "tp-cp-pp-dp" if "--use-tp-pp-dp-mapping" in f else "tp-cp-dp-pp",
        **cp_fields_from_cp_comm_type(
            f.get("--cp-comm-type"), num("--context-parallel-size", 1), "megatron: --cp-comm-type"
        ),
        **expert_fields(f, num),
        **split,
    }
    return fields
