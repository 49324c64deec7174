"""NeMo 2.0: Python lines that override a recipe (``recipe = llm.<model>.pretrain_recipe(...)``).

Attribute paths are those of NeMo v2.4.0 (MegatronStrategy, MegatronMixedPrecision,
PreTrainingDataModule) and of the Megatron-Core configs NeMo nests (kept in
``frameworks/nemo.yaml``). TP communication overlap is NeMo's ``MegatronCommOverlapCallback``.
Import reads back only lines of the form ``recipe.<path> = <literal>`` and the callback line; it
never executes the file.
"""

from __future__ import annotations

import ast
import re

from paraplan.export import megatron_core as core
from paraplan.export.common import (
    ExportRefused,
    canonical_plan,
    check_names,
    exportable,
    framework_args,
    header_lines,
    nodes_and_gpus_per_node,
    require,
)
from paraplan.io.fields import Doc
from paraplan.specs.plan import PlanSpec

NAME = "nemo"
CALLBACK = (
    "recipe.trainer.callbacks.append(run.Config(MegatronCommOverlapCallback, tp_comm_overlap=True))"
)
HANDLED = core.MEGATRON_CORE_FIELDS
SPLIT_KEYS = {  # plan field -> MegatronStrategy argument
    "layers_first_stage": "trainer.strategy.num_layers_in_first_pipeline_stage",
    "layers_last_stage": "trainer.strategy.num_layers_in_last_pipeline_stage",
    "embedding_as_layer": "trainer.strategy.account_for_embedding_in_pipeline_split",
    "loss_as_layer": "trainer.strategy.account_for_loss_in_pipeline_split",
}
LAYOUT_KEY = "trainer.strategy.pipeline_model_parallel_layout"
PRECISION = {"bf16": "bf16-mixed", "fp16": "16-mixed", "fp32": "32", "fp8": "bf16-mixed"}


def overrides(plan: PlanSpec, gpus_per_node: int = 8) -> list[tuple[str, object]]:
    """(recipe attribute path, value) pairs; refuses what NeMo cannot run."""
    fw = exportable(plan, NAME, HANDLED)[0]
    c, mapping = core.megatron_core_checks(
        plan,
        fw,
        "NeMo (Megatron-Core)",
        "virtual_pipeline_model_parallel_size",
        "optimizer_cpu_offload",
    )
    nodes, per_node = nodes_and_gpus_per_node(plan.gpus, gpus_per_node)
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
        # explicit stage counts as a layout (its chunks even or not: export.megatron_core.layout_from_stage_layers), else the split keys
        *(
            [
                (key, getattr(plan, name))
                for name, key in SPLIT_KEYS.items()
                if getattr(plan, name) not in (None, False)
            ]
            if plan.stage_layers is None
            else [
                (
                    LAYOUT_KEY,
                    core.layout_from_stage_layers(
                        plan.stage_layers, plan.vpp, plan.embedding_units, plan.loss_units
                    ),
                )
            ]
        ),
        ("data.micro_batch_size", plan.micro_batch),
        ("data.global_batch_size", plan.global_batch),
        ("data.seq_length", plan.seq_length),
        ("model.config.seq_length", plan.seq_length),
    ]
    if plan.recompute == "none":
        o += [("model.config.recompute_granularity", None)]
    elif plan.recompute == "selective":
        o += [("model.config.recompute_granularity", "selective")]
    else:
        o += [
            ("model.config.recompute_granularity", "full"),
            ("model.config.recompute_method", "uniform"),
            ("model.config.recompute_num_layers", 1),
        ]
    o += [
        ("optim.config.use_distributed_optimizer", c["zero"] >= 1),
        ("trainer.strategy.ddp.use_distributed_optimizer", c["zero"] >= 1),
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
        ("model.config.attention_backend", plan.attention),
    ]
    if core.cp_comm_type(plan):
        o += [("model.config.cp_comm_type", core.cp_comm_type(plan))]
    return o


def export(plan: PlanSpec, gpus_per_node: int = 8, header: str = "") -> str:
    """Python lines to paste after building the recipe."""
    fw = framework_args(NAME)
    pairs = overrides(plan, gpus_per_node)
    check_names(fw, [k for k, _ in pairs])
    lines = header_lines(
        header,
        f"# NeMo 2.0 recipe override; attribute names: {fw.label}",
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
    return "\n".join(lines) + "\n"


_ASSIGN = re.compile(r"^recipe\.([A-Za-z0-9_.]+)\s*=\s*(.+)$")


def _read_overrides(text: str) -> tuple[dict[str, object], bool]:
    """({recipe attribute path: literal value}, whether the TP-overlap callback line is there) of
    override lines; refuses a line of another form, an unknown attribute or a value not a literal."""
    fw = framework_args(NAME)
    v: dict[str, object] = {}
    tp_overlap = False
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith(("from ", "import ")):
            continue
        if line.replace(" ", "") == CALLBACK.replace(" ", ""):
            tp_overlap = True
            continue
        m = _ASSIGN.match(line)
        if not m:
            raise ExportRefused(
                f"nemo: cannot read line {line!r}; expected recipe.<path> = <value>"
            )
        key, value = m.group(1), m.group(2).strip()
        if key not in fw.names:
            raise ExportRefused(
                f"nemo: recipe.{key} is not a known NeMo {fw.version} recipe attribute"
            )
        if value.startswith("AttnBackend."):
            v[key] = value.split(".", 1)[1]
            continue
        try:
            v[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise ExportRefused(f"nemo: recipe.{key} = {value!r} is not a literal") from None
    return v, tp_overlap


def import_plan(text: str) -> dict[str, object]:
    """PlanSpec fields from override lines written by :func:`export` (or by hand, same form)."""
    v, tp_overlap = _read_overrides(text)
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
    granularity = v.get("model.config.recompute_granularity")
    return {
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
