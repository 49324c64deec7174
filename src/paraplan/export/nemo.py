"""NeMo 2.0: Python lines that override a recipe (``recipe = llm.<model>.pretrain_recipe(...)``).

Attribute paths are those of NeMo v2.4.0 (MegatronStrategy, MegatronMixedPrecision,
PreTrainingDataModule) and of the Megatron-Core configs NeMo nests (kept in
``frameworks/nemo.yaml``). TP communication overlap is NeMo's ``MegatronCommOverlapCallback``.
The expert knobs are Megatron-Core TransformerConfig fields (``model.config.*``), and with the model its
experts, multi-head latent attention and MTP modules are written as Megatron-Bridge's recipes set them
(export.megatron_model's arguments under their dataclass names), so the recipe trains the planned model.
The start-up checks of ``facts/nemo_checks.yaml`` run on every export. Import reads back only lines of
the form ``recipe.<path> = <literal>`` and the callback line; it never executes the file.
"""

from __future__ import annotations

from paraplan.export import megatron_core as core
from paraplan.export.common import (
    ExportRefused,
    canonical_plan,
    exportable,
    framework_args,
    header_lines,
    nodes_and_gpus_per_node,
    read_override_file,
    refuse,
    require,
)
from paraplan.export.megatron_model import mla_model_arguments, moe_model_arguments
from paraplan.export.startup import (
    argument_map,
    checked_keys,
    launch_variables,
    startup_checks,
)
from paraplan.io.fields import Doc
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec

NAME = "nemo"
CALLBACK = (
    "recipe.trainer.callbacks.append(run.Config(MegatronCommOverlapCallback, tp_comm_overlap=True))"
)
HANDLED = core.MEGATRON_CORE_FIELDS | core.MEGATRON_EXPERT_FIELDS
CONFIG = "model.config."
# Megatron-LM model flags -> TransformerConfig / MLATransformerConfig fields (megatron_model's arguments)
MODEL_FIELDS = {
    "--num-experts": "num_moe_experts",
    "--moe-router-topk": "moe_router_topk",
    "--moe-ffn-hidden-size": "moe_ffn_hidden_size",
    "--moe-shared-expert-intermediate-size": "moe_shared_expert_intermediate_size",
    "--mtp-num-layers": "mtp_num_layers",
    "--multi-latent-attention": "multi_latent_attention",
    "--q-lora-rank": "q_lora_rank",
    "--kv-lora-rank": "kv_lora_rank",
    "--qk-head-dim": "qk_head_dim",
    "--qk-pos-emb-head-dim": "qk_pos_emb_head_dim",
    "--v-head-dim": "v_head_dim",
}
# Megatron-LM expert flags (megatron_core.expert_knobs) -> the fields they set: the expert tensor parallel
# size on MegatronStrategy, the rest TransformerConfig fields
EXPERT_FIELDS = {
    "--expert-tensor-parallel-size": "trainer.strategy.expert_tensor_parallel_size",
    **{
        f"--{name.replace('_', '-')}": CONFIG + name
        for name in (
            "moe_token_dispatcher_type",
            "moe_enable_deepep",
            "moe_flex_dispatcher_backend",
            "overlap_moe_expert_parallel_comm",
            "moe_expert_capacity_factor",
            "moe_pad_expert_input_to_capacity",
            "moe_router_force_load_balancing",
        )
    },
}
SPLIT_KEYS = {  # plan field -> MegatronStrategy argument
    "layers_first_stage": "trainer.strategy.num_layers_in_first_pipeline_stage",
    "layers_last_stage": "trainer.strategy.num_layers_in_last_pipeline_stage",
    "embedding_as_layer": "trainer.strategy.account_for_embedding_in_pipeline_split",
    "loss_as_layer": "trainer.strategy.account_for_loss_in_pipeline_split",
}
LAYOUT_KEY = "trainer.strategy.pipeline_model_parallel_layout"
PRECISION = {"bf16": "bf16-mixed", "fp16": "16-mixed", "fp32": "32", "fp8": "bf16-mixed"}


def overrides(
    plan: PlanSpec, gpus_per_node: int = 8, model: ModelSpec | None = None, name: str = NAME
) -> list[tuple[str, object]]:
    """(recipe attribute path, value) pairs; refuses what NeMo cannot run. ``name``: the front end
    whose label the refusals carry (Megatron-Bridge renames these pairs: export.megatron_bridge)."""
    fw = exportable(plan, name, HANDLED)[0]
    if name == NAME and plan.moe_dispatcher == "hybridep":  # Megatron-Bridge's pin has the backend
        why = "the Megatron-Core of nemo:24.09 has no moe_flex_dispatcher_backend (Megatron-LM 0d8e0714 adds it)"
        raise refuse(fw, "moe_dispatcher", "hybridep", why)
    core.recompute_modules_of(plan, fw)  # refuses a module Megatron-Core does not have
    c, mapping = core.megatron_core_checks(
        plan,
        fw,
        f"{framework_args(name).framework} (Megatron-Core)",
        "virtual_pipeline_model_parallel_size",
        "optimizer_cpu_offload",
    )
    nodes, per_node = nodes_and_gpus_per_node(plan.gpus, gpus_per_node)
    layout = core.pipeline_layout(plan, model)
    o: list[tuple[str, object]] = [
        ("trainer.num_nodes", nodes),
        ("trainer.devices", per_node),
        ("trainer.strategy.tensor_model_parallel_size", plan.tp),
        ("trainer.strategy.pipeline_model_parallel_size", plan.pp),
        (
            "trainer.strategy.virtual_pipeline_model_parallel_size",
            plan.vpp if plan.vpp > 1 else None,
        ),
        ("trainer.strategy.context_parallel_size", plan.cp),
        ("trainer.strategy.sequence_parallel", c["sequence_parallel"]),
        ("trainer.strategy.expert_model_parallel_size", plan.ep),
        ("trainer.strategy.use_tp_pp_dp_mapping", core.ORDERS[mapping[0]]),
        # a layout (explicit stage counts, or uneven interleaving: core.pipeline_layout), else the split keys
        *(
            [
                (key, getattr(plan, name))
                for name, key in SPLIT_KEYS.items()
                if getattr(plan, name) not in (None, False)
            ]
            if layout is None
            else [(LAYOUT_KEY, layout)]
        ),
        ("data.micro_batch_size", plan.micro_batch),
        ("data.global_batch_size", plan.global_batch),
        ("data.seq_length", plan.seq_length),
        ("model.config.seq_length", plan.seq_length),
    ]
    o += _recompute(plan)
    sharded = core.distributed_optimizer(plan, c["zero"])
    o += [
        ("optim.config.use_distributed_optimizer", sharded),
        ("trainer.strategy.ddp.use_distributed_optimizer", sharded),
        ("trainer.strategy.ddp.grad_reduce_in_fp32", plan.grad_dtype == "fp32"),
    ]
    if c["zero"] >= 2:
        o += [
            ("trainer.strategy.fsdp", "megatron"),
            ("trainer.strategy.ddp.data_parallel_sharding_strategy", core.SHARDING[c["zero"]]),
        ]
    o += [
        ("optim.config.optimizer_cpu_offload", plan.offload_optimizer),
        ("trainer.strategy.ddp.overlap_grad_reduce", c["overlap_dp_grad_reduce"]),
        ("trainer.strategy.ddp.overlap_param_gather", c["zero"] >= 1 and c["overlap_param_gather"]),
        ("trainer.plugins.precision", PRECISION[plan.dtype]),
        ("trainer.plugins.fp8", "hybrid" if plan.dtype == "fp8" else None),
        ("trainer.plugins.fp8_param_gather", core.fp8_primary_weights(plan)),
        ("model.config.attention_backend", plan.attention),
    ]
    if core.cp_comm_type(plan):
        o += [("model.config.cp_comm_type", core.cp_comm_type(plan))]
    o += _experts(plan, model is not None and model.experts > 0)
    o += _model_fields(model) if model is not None else []
    return o


def _recompute(plan: PlanSpec) -> list[tuple[str, object]]:
    """Recomputation as TransformerConfig fields: selective (with its module names), full of the first
    N layers of each chunk (block), or full of every layer (uniform, 1)."""
    if plan.recompute == "none":
        return [("model.config.recompute_granularity", None)]
    if plan.recompute == "selective":
        modules = list(plan.recompute_modules) if plan.recompute_modules else None
        return [("model.config.recompute_granularity", "selective")] + (
            [("model.config.recompute_modules", modules)] if modules else []
        )
    block = plan.recompute_num_layers is not None
    return [
        ("model.config.recompute_granularity", "full"),
        ("model.config.recompute_method", "block" if block else "uniform"),
        ("model.config.recompute_num_layers", plan.recompute_num_layers if block else 1),
    ]


def _experts(plan: PlanSpec, moe: bool) -> list[tuple[str, object]]:
    """The expert knobs (megatron_core.expert_knobs) as the Megatron-Core fields their Megatron-LM flags
    set (EXPERT_FIELDS)."""
    return [(EXPERT_FIELDS[flag], value) for flag, value in core.expert_knobs(plan, moe)]


def _model_fields(model: ModelSpec) -> list[tuple[str, object]]:
    """The model's experts, MLA and MTP as TransformerConfig fields: Megatron-LM's model arguments
    (export.megatron_model) under their dataclass names; which layers are MoE as moe_layer_freq's
    per-layer list of 0/1 (specs.moe_model.is_moe_layer)."""
    from paraplan.specs.moe_model import is_moe_layer

    flags = argument_map(moe_model_arguments(model) + mla_model_arguments(model))
    o: list[tuple[str, object]] = [
        (CONFIG + MODEL_FIELDS[f], v if v is True else int(v))
        for f, v in flags.items()
        if f in MODEL_FIELDS
    ]
    if model.qk_norm:  # TransformerConfig.qk_layernorm (Megatron-LM --qk-layernorm)
        o += [(CONFIG + "qk_layernorm", True)]
    if "--moe-layer-freq" in flags:
        freq = [int(is_moe_layer(model, i)) for i in range(model.layers)]
        o += [(CONFIG + "moe_layer_freq", freq)]
    return o


def export(
    plan: PlanSpec, gpus_per_node: int = 8, header: str = "", model: ModelSpec | None = None
) -> str:
    """Python lines to paste after building the recipe."""
    pairs = overrides(plan, gpus_per_node, model)
    context = {
        "tp_comm_overlap": bool(canonical_plan(plan)["overlap_tp_comm"]),
        "n_layers": model.layers if model is not None else None,
    }
    fw = checked_keys(NAME, plan, pairs, context)
    lines = header_lines(
        header,
        f"# NeMo 2.0 recipe override; attribute names: {fw.label}",
        f"# start-up checks: {len(startup_checks(NAME).checks)} from NeMo and Megatron-Core source pass",
        "# recipe = llm.<model>.pretrain_recipe(...)  # then:",
    )
    lines.append("from megatron.core.transformer.enums import AttnBackend")
    if canonical_plan(plan)["overlap_tp_comm"]:
        lines.append(
            "from nemo.lightning.pytorch.callbacks.megatron_comm_overlap import MegatronCommOverlapCallback"
        )
    for key, value in pairs:
        text = f"AttnBackend.{value}" if key == "model.config.attention_backend" else repr(value)
        lines.append(f"recipe.{key} = {text}")
    if canonical_plan(plan)["overlap_tp_comm"]:
        lines.append(CALLBACK)
    return "\n".join(lines + environment_lines(dict(pairs), context)) + "\n"


def environment_lines(
    given: dict, context: dict, name: str = NAME, who: str = "NeMo's"
) -> list[str]:
    """The launch environment (facts/<name>_checks.yaml ``settings``: what the front end's PerfEnvPlugin
    sets), as comments to apply on the nemo-run executor, each with its source line."""
    variables = launch_variables(name, given, context)
    if not variables:
        return []
    out = [f"# launch environment, set on the nemo-run executor as {who} PerfEnvPlugin does:"]
    for v in variables:
        out.append(f'# executor.env_vars["{v["variable"]}"] = "{v["value"]}"  # {v["where"]}')
    return out


def _read_overrides(text: str) -> tuple[dict[str, object], bool]:
    """({recipe attribute path: literal value}, whether the TP-overlap callback line is there) of
    override lines (common.read_override_file: a line of another form, an unknown attribute or a value
    not a literal is refused)."""
    callbacks = []

    def callback(line: str, assigned, values: dict) -> bool:
        if line.replace(" ", "") != CALLBACK.replace(" ", ""):
            return False
        callbacks.append(line)
        return True

    return read_override_file(text, NAME, "recipe", callback), bool(callbacks)


def import_plan(text: str) -> dict[str, object]:
    """PlanSpec fields from override lines written by :func:`export` (or by hand, same form)."""
    return plan_fields(*_read_overrides(text))


def plan_fields(v: dict[str, object], tp_overlap: bool) -> dict[str, object]:
    """PlanSpec fields from {recipe attribute path: value} and whether TP overlap is on (also what
    Megatron-Bridge's import gives, its keys renamed to these)."""
    require(
        v,
        ("trainer.num_nodes", "trainer.devices", "data.global_batch_size", "data.seq_length"),
        "nemo: recipe.",
    )
    r = Doc(v, "nemo: recipe")
    pp = r.integer("trainer.strategy.pipeline_model_parallel_size", 1, minimum=1)
    vpp = r.integer("trainer.strategy.virtual_pipeline_model_parallel_size", 1, minimum=1)
    split: dict[str, object] = {
        name: v[key] for name, key in SPLIT_KEYS.items() if v.get(key) not in (None, False)
    }
    if v.get(LAYOUT_KEY):
        split["stage_layers"], vpp = core.stage_layers_from_layout(str(v[LAYOUT_KEY]), pp)
    zero = 1 if r.get("optim.config.use_distributed_optimizer", False) else 0
    if v.get("trainer.strategy.fsdp") == "megatron":
        zero = r.choice(
            "trainer.strategy.ddp.data_parallel_sharding_strategy",
            core.sharding_stages(zero),
            "no_shard",
        )
    precision = r.choice(
        "trainer.plugins.precision",
        {"bf16-mixed": "bf16", "16-mixed": "fp16", "32": "fp32"},
        "bf16-mixed",
    )
    dtype = "fp8" if v.get("trainer.plugins.fp8") else precision
    grads = "fp32" if v.get("trainer.strategy.ddp.grad_reduce_in_fp32", True) else "bf16"
    granularity = v.get("model.config.recompute_granularity")
    return {
        **_recompute_fields(v, r),
        **_expert_fields(v, r),
        "gpus": r.integer("trainer.num_nodes", minimum=1) * r.integer("trainer.devices", minimum=1),
        "tp": r.integer("trainer.strategy.tensor_model_parallel_size", 1, minimum=1),
        "pp": pp,
        "cp": r.integer("trainer.strategy.context_parallel_size", 1, minimum=1),
        "ep": r.integer("trainer.strategy.expert_model_parallel_size", 1, minimum=1),
        "vpp": vpp,
        "schedule": "interleaved" if vpp > 1 else "1f1b",
        "micro_batch": r.integer("data.micro_batch_size", 1, minimum=1),
        "global_batch": r.integer("data.global_batch_size", minimum=1),
        "seq_length": r.integer("data.seq_length", minimum=1),
        "sequence_parallel": bool(v.get("trainer.strategy.sequence_parallel", False)),
        "recompute": granularity if granularity in ("full", "selective") else "none",
        "zero": zero,
        "dtype": dtype,
        "fp8_weight_copies": dtype == "fp8" and not v.get("trainer.plugins.fp8_param_gather"),
        "grad_dtype": grads,
        "attention": "unfused" if v.get("model.config.attention_backend") == "unfused" else "flash",
        "offload_optimizer": bool(v.get("optim.config.optimizer_cpu_offload", False)),
        "overlap_dp_grad_reduce": bool(v.get("trainer.strategy.ddp.overlap_grad_reduce", False)),
        "overlap_param_gather": bool(v.get("trainer.strategy.ddp.overlap_param_gather", False))
        or zero == 0,
        "overlap_tp_comm": tp_overlap,
        "placement": core.placement_of(v.get("trainer.strategy.use_tp_pp_dp_mapping")),
        **core.cp_fields_from_cp_comm_type(
            v.get("model.config.cp_comm_type"),
            r.integer("trainer.strategy.context_parallel_size", 1, minimum=1),
            "nemo: recipe.model.config.cp_comm_type",
        ),
        **split,
    }


def _recompute_fields(v: dict, r: Doc) -> dict[str, object]:
    """recompute_num_layers and recompute_modules read back: full recomputation of every layer is
    uniform over 1 layer; block over N is the first N layers of each chunk; anything else has no plan."""
    out: dict[str, object] = {}
    method = v.get(CONFIG + "recompute_method")
    if v.get(CONFIG + "recompute_granularity") == "full":
        layers = r.integer(CONFIG + "recompute_num_layers", 1, minimum=1)
        if method == "block":
            out["recompute_num_layers"] = layers
        elif method not in (None, "uniform") or layers != 1:
            raise ExportRefused(
                f"nemo: recipe.{CONFIG}recompute_method {method!r} over {layers} layers has no plan"
                " field (allowed: uniform over 1, or block)"
            )
    modules = v.get(CONFIG + "recompute_modules")
    if modules:
        if v.get(CONFIG + "recompute_granularity") != "selective":
            raise ExportRefused(
                f"nemo: recipe.{CONFIG}recompute_modules without selective recomputation has no plan field"
            )
        out["recompute_modules"] = tuple(str(m) for m in modules)
    return out


def _expert_fields(v: dict, r: Doc) -> dict[str, object]:
    """_experts read back (megatron_core.expert_fields, each flag looked up under its field); without
    expert_tensor_parallel_size etp is 1 (as Megatron-LM's import)."""
    return core.expert_fields(
        lambda flag: v.get(EXPERT_FIELDS.get(flag) or CONFIG + MODEL_FIELDS[flag]),
        r.integer(EXPERT_FIELDS["--expert-tensor-parallel-size"], 1, minimum=1),
        f"nemo: recipe.{CONFIG}moe_token_dispatcher_type",
        "moe_enable_deepep",
    )
