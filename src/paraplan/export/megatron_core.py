"""What the Megatron-Core front ends share (Megatron-LM's launch line, NeMo's recipe overrides).

The plan fields both map, Megatron's two rank orders (tp-cp-ep-dp-pp, or tp-cp-ep-pp-dp with
``--use-tp-pp-dp-mapping``; megatron/training/initialize.py), ZeRO stages as the distributed optimizer
(1) and Megatron FSDP's sharding strategies ``optim_grads`` (2) and ``optim_grads_params`` (3), the
refusals of Megatron-Core, its context-parallel communication types, and its pipeline layout string.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from paraplan.export.common import (
    COMMON_FIELDS,
    ExportRefused,
    canonical_plan,
    refuse,
    same_placement,
)
from paraplan.graph.ops import POLICY_MODULES
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec
from paraplan.specs.rules import (
    even_share,
    interleave_split_rule,
    megatron_fsdp_rule,
    megatron_overlap_rule,
)
from paraplan.specs.split import (
    accounted_units,
    chunks_in_model_order,  # noqa: F401 (re-exported)
    model_part_layers,
    stage_layer_counts,
    stages_of_chunks,
)

ORDERS = {"tp-cp-dp-pp": False, "tp-cp-pp-dp": True}  # placement -> --use-tp-pp-dp-mapping
SHARDING = {2: "optim_grads", 3: "optim_grads_params"}
LAYOUT_FLAG = "--pipeline-model-parallel-layout"
# a layout names each of pp·vpp chunks in a few characters: 16 KiB holds thousands of chunks; expanded
# ('t*N', '(..)*N') it holds one character per layer, and no model has a million layers (issue 37: a
# 5 MB layout or 't*99999999' made import run for minutes)
MAX_LAYOUT_CHARS = 16 * 1024
MAX_LAYOUT_EXPANDED_CHARS = 1_000_000
# the plan fields both front ends map (Megatron-LM adds its expert and recompute-module fields)
MEGATRON_CORE_FIELDS = COMMON_FIELDS | {
    "ep",
    "stage_layers",
    "layers_first_stage",
    "layers_last_stage",
    "embedding_as_layer",
    "loss_as_layer",
    "tp_layout",
    "cp_algorithm",
}
# the expert, recomputation and precision knobs both front ends map (Megatron-Core config fields, which
# NeMo's recipe sets as model.config.<field> / trainer.strategy.ddp.<field> / trainer.plugins.<field>
# and Megatron-LM as --<flag>)
MEGATRON_EXPERT_FIELDS = frozenset(
    "recompute_num_layers recompute_modules etp moe_dispatcher moe_a2a_overlap capacity_factor"
    " moe_balance grad_dtype fp8_weight_copies".split()
)

# the per-op checkpointing policies (graph.ops.POLICY_MODULES: torchtitan's per-op SAC, MaxText's minimal_flash):
# policies, not Megatron-Core module names (TransformerConfig.recompute_modules takes core_attn, moe_act,
# layernorm, mla_up_proj, mlp, moe, shared_experts)
NOT_MEGATRON_MODULES = frozenset(POLICY_MODULES)


def recompute_modules_of(plan: PlanSpec, framework: str) -> list[str] | None:
    """The plan's selective-recompute modules as Megatron-Core names; refuses a per-op checkpointing policy
    (torchtitan's, MaxText's)."""
    modules = list(plan.recompute_modules or ())
    if foreign := sorted(NOT_MEGATRON_MODULES.intersection(modules)):
        why = f"{foreign} is a per-op checkpointing policy (torchtitan / MaxText), not a Megatron-Core recompute module"
        raise refuse(framework, "recompute_modules", tuple(modules), why)
    return modules or None


# plan.moe_dispatcher -> Megatron-Core's token dispatcher type (TransformerConfig.moe_token_dispatcher_type,
# Megatron-LM --moe-token-dispatcher-type; core_v0.14.0 megatron/training/arguments.py: {allgather,
# alltoall, flex}); DeepEP is flex with moe_enable_deepep (--moe-enable-deepep); Hybrid-EP is flex with
# moe_flex_dispatcher_backend "hybridep" (--moe-flex-dispatcher-backend hybridep; TransformerConfig at
# Megatron-LM 0d8e0714, the Megatron-Core Megatron-Bridge v0.2.0 pins; absent from core_v0.14.0)
DISPATCHER_TYPES = {
    "alltoall": "alltoall",
    "allgather": "allgather",
    "deepep": "flex",
    "hybridep": "flex",
}
HYBRIDEP_BACKEND = ("--moe-flex-dispatcher-backend", "hybridep")


def states_dispatcher(plan: PlanSpec, moe: bool) -> bool:
    """Does an export state the dispatcher? For every MoE model (``moe``: Megatron-Core's default is
    allgather, arguments.py line 2871, not paraplan's alltoall), whenever experts are split, and for any
    dispatcher other than alltoall."""
    return moe or plan.ep * plan.etp > 1 or plan.moe_dispatcher != "alltoall"


def dispatcher_of(
    kind: object, moe: bool, deepep: bool, where: str, deepep_name: str, backend: object = None
) -> str:
    """The plan dispatcher of a Megatron-Core dispatcher type read from a file (``where`` names the
    field and ``deepep_name`` the DeepEP switch for the refusals); ``kind`` None: not stated,
    Megatron-Core's default for an MoE model (``moe``: allgather), alltoall otherwise; flex is DeepEP
    only with the switch on (``deepep``), Hybrid-EP with the flex backend ``backend`` "hybridep"."""
    if kind is None:
        kind = "allgather" if moe else "alltoall"
    if kind == "flex" and backend == HYBRIDEP_BACKEND[1]:
        return "hybridep"
    names = {k: n for n, k in DISPATCHER_TYPES.items() if n != "hybridep"}
    if not isinstance(kind, str) or kind not in names:
        raise ExportRefused(f"{where} {kind!r} has no plan field")
    if kind == "flex" and not deepep:
        raise ExportRefused(f"{where} flex without {deepep_name} has no plan field")
    return names[kind]


def expert_knobs(plan: PlanSpec, moe: bool) -> list[tuple[str, object]]:
    """The expert knobs as (Megatron-LM flag, value; True for a switch), Megatron-Core v0.14 names, which
    NeMo's recipe sets as the config fields the flags set: the expert tensor parallel size whenever
    experts are split (Megatron's etp defaults to tp), the dispatcher for every MoE model (``moe``:
    Megatron's default is allgather, arguments.py line 2871; DeepEP is flex with --moe-enable-deepep,
    Hybrid-EP flex with --moe-flex-dispatcher-backend hybridep: the front ends pinned before it refuse it),
    batch-level EP all-to-all overlap (--overlap-moe-expert-parallel-comm, new in v0.14), capacity and
    padding, forced balance (--moe-router-force-load-balancing, Megatron's benchmarking switch)."""
    k: list[tuple[str, object]] = []
    if plan.ep * plan.etp > 1:
        k += [("--expert-tensor-parallel-size", plan.etp)]
    if states_dispatcher(plan, moe):
        k += [("--moe-token-dispatcher-type", DISPATCHER_TYPES[plan.moe_dispatcher])]
        if plan.moe_dispatcher == "deepep":
            k += [("--moe-enable-deepep", True)]
        if plan.moe_dispatcher == "hybridep":
            k += [HYBRIDEP_BACKEND]
    if plan.moe_a2a_overlap:
        k += [("--overlap-moe-expert-parallel-comm", True)]
    if plan.capacity_factor is not None:
        k += [("--moe-expert-capacity-factor", float(plan.capacity_factor))]
        k += [("--moe-pad-expert-input-to-capacity", True)]
    if plan.moe_balance == "forced":
        k += [("--moe-router-force-load-balancing", True)]
    return k


def expert_fields(
    lookup: Callable[[str], object], etp: int, where: str, deepep_name: str
) -> dict[str, object]:
    """expert_knobs read back: ``lookup(flag)`` is the value a file gives the Megatron-LM flag (or the
    config field it sets; None when absent), ``etp`` the expert tensor parallel size read (1 when not
    stated: a file that relies on Megatron's default etp = tp for an MoE model must state it);
    ``where`` and ``deepep_name`` name the dispatcher field and the DeepEP switch for the refusals."""
    dispatcher = dispatcher_of(
        lookup("--moe-token-dispatcher-type"),
        bool(lookup("--num-experts")),
        bool(lookup("--moe-enable-deepep")),
        where,
        deepep_name,
        lookup(HYBRIDEP_BACKEND[0]),
    )
    capacity = lookup("--moe-expert-capacity-factor")
    return {
        "etp": etp,
        "moe_dispatcher": dispatcher,
        "moe_a2a_overlap": bool(lookup("--overlap-moe-expert-parallel-comm")),
        "capacity_factor": float(capacity) if capacity is not None else None,  # type: ignore[arg-type]
        "moe_balance": "forced" if lookup("--moe-router-force-load-balancing") else "learned",
    }


def fp8_primary_weights(plan: PlanSpec) -> bool:
    """fp8 training without cached fp8 weight copies: the weights are kept and gathered in fp8
    (Megatron-LM --fp8-param-gather, NeMo's fp8_param_gather; cost.memory.fp8_weight_copy_bytes_per_param)."""
    return plan.dtype == "fp8" and not plan.fp8_weight_copies


def distributed_optimizer(plan: PlanSpec, zero: int) -> bool:
    """Is the distributed optimizer on? ZeRO >= 1, and for fp8 primary weights on one data-parallel rank
    (Megatron-LM asserts --fp8-param-gather with it, arguments.py line 615; sharding over one rank is none,
    and the canonical plan's ZeRO is 0 there)."""
    return zero >= 1 or (fp8_primary_weights(plan) and plan.dp * plan.cp == 1)


def placement_of(tp_pp_dp_mapping: object) -> str:
    """The plan placement of a Megatron-Core rank order (``use_tp_pp_dp_mapping`` set or not)."""
    return next(order for order, mapping in ORDERS.items() if mapping == bool(tp_pp_dp_mapping))


def sharding_stages(zero_without_fsdp: int) -> dict[str, int]:
    """Megatron FSDP's data-parallel sharding strategy -> ZeRO stage; ``no_shard`` keeps the stage the
    distributed optimizer gives (``zero_without_fsdp``)."""
    return {"no_shard": zero_without_fsdp, "optim": 1, **{v: k for k, v in SHARDING.items()}}


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
    if c["schedule"] not in ("1f1b", "interleaved"):
        raise refuse(
            fw, "schedule", c["schedule"], f"{who} runs 1F1B or interleaved 1F1B pipelines"
        )
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
    if why := megatron_fsdp_rule(c["zero"], plan.pp):  # the search's rule too (search.launch)
        raise refuse(fw, "zero", c["zero"], why)
    if why := megatron_overlap_rule(
        c["zero"], c["overlap_dp_grad_reduce"], c["overlap_param_gather"]
    ):
        raise refuse(fw, "overlap_param_gather", True, why)
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


def pipeline_layout(plan: PlanSpec, model: ModelSpec | None) -> str | None:
    """The plan's pipeline layout string when its split needs one: explicit stage counts, or (with the
    model) an interleaved split whose stages do not cut into equal chunks (specs.rules.interleave_split_rule:
    Megatron-Core refuses the first/last-stage counts with vpp), or a split the split flags do not give
    (split_flag_counts: the default split of 61 layers over 8 stages, 7 8 8 8 8 8 7 7); None when the
    split keys state it."""
    mtp = model.mtp_layers if model is not None else 0
    units = accounted_units(plan.embedding_units, plan.loss_units, mtp)
    stages = plan.stage_layers
    if stages is None and plan.pp > 1 and model is not None:
        groups = plan.split(model.layers, mtp)
        uneven = stage_layer_counts(groups) != split_flag_counts(plan, model.layers)
        if uneven or (plan.vpp > 1 and interleave_split_rule(groups, plan.vpp, *units)):
            stages = tuple(stage_layer_counts(groups))
    if stages is None:
        return None
    return layout_from_stage_layers(stages, plan.vpp, *units, mtp_layers=mtp)


def written_plan(plan: PlanSpec, model: ModelSpec | None) -> PlanSpec:
    """The plan as a Megatron-LM or NeMo export states it: where a pipeline layout is written
    (pipeline_layout), its stage counts explicit and no split switches (the layout replaces them), which
    is the same split; the plan itself otherwise. What an export reads back as."""
    if plan.stage_layers is not None or pipeline_layout(plan, model) is None:
        return plan
    mtp = model.mtp_layers if model is not None else 0
    return explicit_stages_plan(plan, stage_layer_counts(plan.split(model.layers, mtp)))  # type: ignore[union-attr]


def explicit_stages_plan(plan: PlanSpec, stages: list[int]) -> PlanSpec:
    """``plan`` with its split stated as explicit ``stage_layers`` (``stages``: decoder layers per
    stage) and no split switches, which the explicit counts replace: the same split, as the
    Megatron-LM, NeMo and torchtitan exports write it (their ``written_plan``)."""
    return plan.model_copy(
        update=dict(
            stage_layers=tuple(stages),
            layers_first_stage=None,
            layers_last_stage=None,
            embedding_as_layer=False,
            loss_as_layer=False,
        )
    )


def split_flag_counts(plan: PlanSpec, layers: int) -> list[int] | None:
    """The decoder layers per stage Megatron-Core builds from the split flags alone: the first / last stage
    counts when given, the middle stages even; else the layers with the embedding and the loss (not the MTP
    modules, which paraplan counts beside the loss) counted as one layer each when accounted, divided evenly
    (transformer_block.py get_num_layers_to_build, core_v0.14.0 lines 112-145); None where Megatron-Core
    refuses the split (not divisible over the stages, or a stage's layers over vpp)."""
    pp, first, last = plan.pp, plan.layers_first_stage, plan.layers_last_stage
    if first is not None or last is not None:
        ends = [n for n in (first, last) if n is not None]
        middle = pp - len(ends)
        rest = layers - sum(ends)
        if middle <= 0 or rest % middle:
            return None
        counts = [rest // middle] * pp
        if first is not None:
            counts[0] = first
        if last is not None:
            counts[-1] = last
        return counts
    e, l = int(plan.embedding_as_layer), int(plan.loss_as_layer)
    per_stage = even_share(layers + e + l, pp)  # transformer_config.py lines 1085-1116
    if not per_stage or not even_share(per_stage, plan.vpp):
        return None
    counts = [per_stage] * pp
    counts[0] -= e
    counts[-1] -= l
    return counts


def layout_from_stage_layers(
    stage_layers: tuple[int, ...],
    vpp: int,
    embedding_units: int = 0,
    loss_units: int = 0,
    mtp_layers: int = 0,
) -> str:
    """Megatron-LM's layout string: pp·vpp chunks in model order (chunk v of stage s at position v·pp + s, as
    Megatron-Core's PipelineParallelLayerLayout reads it), 'E' first, 't*n' decoder layers (each stage's over its chunks
    by specs.split.model_part_layers), the MTP modules 'm' and the loss 'L' last (the layout wants every 'm' in the
    last chunk of its rank, after the decoder layers)."""
    layers = model_part_layers(list(stage_layers), vpp, embedding_units, loss_units)
    chunks = [f"t*{n}" if n else "" for n in layers]
    chunks[0] = "E" + chunks[0]
    chunks[-1] += "m" * mtp_layers + "L"
    return "|".join(chunks)


def _expand(pattern: str, text: str) -> str:
    """``text`` with each ``X*N`` of ``pattern`` written out, refused before it grows past
    MAX_LAYOUT_EXPANDED_CHARS (the growth is counted from the repeat counts, nothing is built first)."""
    matches = list(re.finditer(pattern, text))
    grown = len(text) + sum(len(m.group(1)) * int(m.group(2)) - len(m.group(0)) for m in matches)
    if grown > MAX_LAYOUT_EXPANDED_CHARS:
        raise ExportRefused(
            f"megatron: {LAYOUT_FLAG} expands to more than {MAX_LAYOUT_EXPANDED_CHARS} layers;"
            " allowed: one entry per layer of the model"
        )
    return re.sub(pattern, lambda m: m.group(1) * int(m.group(2)), text)


def stage_layers_from_layout(layout: str, pp: int) -> tuple[tuple[int, ...], int]:
    """(decoder layers per stage, vpp) from a layout string, its chunks even or not; refuses what a plan cannot hold
    (MTP modules 'm' anywhere but beside the loss, where paraplan places them)."""
    if len(layout) > MAX_LAYOUT_CHARS:
        raise ExportRefused(
            f"megatron: {LAYOUT_FLAG} is {len(layout)} characters; allowed: at most {MAX_LAYOUT_CHARS}"
        )
    text = layout.replace(",", "")
    text = _expand(r"\(([^)]+)\)\*(\d+)", text)
    text = _expand(r"(.)\*(\d+)", text)
    chunks = text.split("|")
    if not (vpp := even_share(len(chunks), pp)):
        raise ExportRefused(
            f"megatron: {LAYOUT_FLAG} has {len(chunks)} chunks, not a multiple of pp={pp}"
        )
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
    return stages_of_chunks([chunk.count("t") for chunk in chunks], pp), vpp
