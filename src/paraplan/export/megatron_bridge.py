"""Megatron-Bridge: Python lines that override a recipe's ConfigContainer (``cfg = <recipe>(...)``).

Field paths are those of Megatron-Bridge v0.2.0 (``frameworks/megatron-bridge.yaml``): the model
provider is a Megatron-Core TransformerConfig of the Megatron-LM the release pins (0d8e0714), so the
parallel sizes, recomputation, expert and MLA fields sit on ``cfg.model``; the batch on ``cfg.train``;
the DDP and optimizer switches on ``cfg.ddp`` / ``cfg.optimizer``; precision is a named
``mixed_precision`` recipe (whose grad_reduce_in_fp32 is then set, and fp8_param_gather and the fields a
recipe sets that no plan prices as export.bridge_precision writes them from the recipe facts, as its setup
copies them onto the model, DDP and optimizer configs); TP and EP all-to-all overlap a CommOverlapConfig.

The plan is mapped once, by NeMo's exporter (the same Megatron-Core fields under NeMo 2.0's paths:
export.nemo.overrides, refusals labelled Megatron-Bridge), and renamed here; DeepEP is the flex dispatcher
with ``moe_flex_dispatcher_backend`` (``moe_enable_deepep`` is deprecated at 0d8e0714), Hybrid-EP the
flex dispatcher with backend "hybridep" (TransformerConfig.moe_flex_dispatcher_backend at 0d8e0714). The start-up
checks of ``facts/megatron-bridge_checks.yaml`` (ConfigContainer.validate and the pinned Megatron-Core)
run on every export. Import reads back only ``cfg.<path> = <literal>`` lines and the forms written here.
"""

from __future__ import annotations

import ast
import re

from paraplan.export import nemo
from paraplan.export.bridge_precision import precision_overrides, read_precision
from paraplan.export.common import (
    ExportRefused,
    canonical_plan,
    framework_args,
    header_lines,
    nodes_and_gpus_per_node,
    read_override_file,
    refuse,
)
from paraplan.export.startup import checked_keys, startup_checks
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec

NAME = "megatron-bridge"
# NeMo 2.0 recipe paths -> ConfigContainer paths (the first matching prefix renames)
PREFIXES = (
    ("trainer.strategy.use_tp_pp_dp_mapping", "dist.use_tp_pp_dp_mapping"),
    ("trainer.strategy.ddp.grad_reduce_in_fp32", "mixed_precision.grad_reduce_in_fp32"),
    ("trainer.strategy.ddp.", "ddp."),
    ("trainer.strategy.", "model."),
    (
        "model.config.overlap_moe_expert_parallel_comm",
        "comm_overlap.overlap_moe_expert_parallel_comm",
    ),
    ("model.config.moe_enable_deepep", "model.moe_flex_dispatcher_backend"),
    ("model.config.", "model."),
    ("optim.config.", "optimizer."),
    ("data.micro_batch_size", "train.micro_batch_size"),
    ("data.global_batch_size", "train.global_batch_size"),
    ("data.seq_length", "dataset.sequence_length"),
    ("trainer.plugins.fp8_param_gather", "mixed_precision.fp8_param_gather"),
)
# NeMo's precision plugin -> Bridge's mixed-precision recipe (training/mixed_precision.py: bf16_mixed line
# 172, fp16_mixed line 188, bf16_with_fp8_delayed_scaling_mixed line 204, NeMo's 'hybrid' delayed scaling)
PRECISION = {"bf16-mixed": "bf16_mixed", "16-mixed": "fp16_mixed"}
FP8_PRECISION = "bf16_with_fp8_delayed_scaling_mixed"
# a framework profile's fp8_recipe (specs/framework.py) -> the Bridge recipe that trains it
# (training/mixed_precision.py at 7af9601c: bf16_with_mxfp8_mixed line 242, fp8_recipe "mxfp8";
# bf16_with_fp8_current_scaling_mixed line 272, "tensorwise"; bf16_with_fp8_subchannel_scaling_mixed
# line 360, "blockwise"; bf16_with_nvfp4_mixed line 392, fp4_recipe "nvfp4")
FP8_RECIPES = {
    "delayed": FP8_PRECISION,
    "current": "bf16_with_fp8_current_scaling_mixed",
    "blockwise": "bf16_with_fp8_subchannel_scaling_mixed",
    "mxfp8": "bf16_with_mxfp8_mixed",
    "nvfp4": "bf16_with_nvfp4_mixed",
}
LAUNCH = re.compile(
    r"^\s*#\s*launch:\s*torchrun\s+--nnodes=(\d+)\s+--nproc-per-node=(\d+)\b", flags=re.M
)
MP_CALL = "get_mixed_precision_config"
CO_CALL = "CommOverlapConfig"


def _rename(key: str) -> str:
    """The ConfigContainer path of a NeMo 2.0 recipe path (PREFIXES)."""
    for old, new in PREFIXES:
        if key.startswith(old):
            return new + key[len(old) :]
    raise AssertionError(f"megatron-bridge: no ConfigContainer path for NeMo's {key}")


def fp8_precision(fp8_recipe: str | None) -> str:
    """The Bridge mixed-precision recipe of a profile's fp8 recipe (FP8_RECIPES); delayed scaling when
    the profile is not known (None) or states none."""
    return FP8_RECIPES.get(fp8_recipe or "delayed", FP8_PRECISION)


def overrides(
    plan: PlanSpec,
    gpus_per_node: int = 8,
    model: ModelSpec | None = None,
    fp8_recipe: str | None = None,
) -> list[tuple[str, object]]:
    """(ConfigContainer path, value) pairs; refuses what Megatron-Bridge cannot run. ``fp8_recipe``:
    the fp8 recipe of the framework profile the plan was priced with (FrameworkSpec.fp8_recipe)."""
    label = framework_args(NAME).label
    if plan.dtype == "fp32":
        raise refuse(
            label, "dtype", "fp32", "no mixed_precision recipe of this release trains fp32"
        )
    out: list[tuple[str, object]] = []
    for key, value in nemo.overrides(plan, gpus_per_node, model, name=NAME):
        if key in ("trainer.num_nodes", "trainer.devices", "trainer.plugins.fp8"):
            continue  # the launch line; the fp8 recipe is the mixed_precision recipe's
        if key == "trainer.plugins.precision":
            recipe = fp8_precision(fp8_recipe) if plan.dtype == "fp8" else PRECISION[value]
            out.append(("mixed_precision", recipe))
            out += precision_overrides(recipe, plan, label)  # export.bridge_precision
        elif key == "trainer.strategy.fsdp":  # Megatron FSDP (ConfigContainer.validate line 1238)
            out += [("ddp.use_megatron_fsdp", True), ("checkpoint.ckpt_format", "fsdp_dtensor")]
        elif key == "model.config.moe_enable_deepep":
            out.append((_rename(key), "deepep"))
        elif key == "trainer.plugins.fp8_param_gather":
            continue  # the recipe's, or precision_overrides'
        else:
            out.append((_rename(key), value))
    out.append(("comm_overlap.tp_comm_overlap", bool(canonical_plan(plan)["overlap_tp_comm"])))
    return out


def export(
    plan: PlanSpec,
    gpus_per_node: int = 8,
    header: str = "",
    model: ModelSpec | None = None,
    fp8_recipe: str | None = None,
) -> str:
    """Python lines to paste after building the recipe's ConfigContainer, with the torchrun line;
    an fp8 plan trains the profile's fp8 recipe (``fp8_recipe``; delayed scaling when not known)."""
    pairs = overrides(plan, gpus_per_node, model, fp8_recipe)
    context = {"world_size": plan.gpus, "n_layers": model.layers if model is not None else None}
    fw = checked_keys(NAME, plan, pairs, context)
    nodes, per_node = nodes_and_gpus_per_node(plan.gpus, gpus_per_node)
    lines = header_lines(
        header,
        f"# Megatron-Bridge ConfigContainer override; field names: {fw.label}",
        f"# start-up checks: {len(startup_checks(NAME).checks)} from Megatron-Bridge and Megatron-Core"
        " source pass",
        f"# launch: torchrun --nnodes={nodes} --nproc-per-node={per_node} <your pretrain script>",
        "# cfg = <recipe>_pretrain_config(...)  # then, before pretrain(cfg, forward_step):",
        "from megatron.bridge.training.comm_overlap import CommOverlapConfig",
        f"from megatron.bridge.training.mixed_precision import {MP_CALL}",
        "from megatron.core.transformer.enums import AttnBackend",
    )
    if plan.dtype == "fp8":
        lines.insert(
            -4,
            f"# fp8 recipe: {fp8_recipe} (the plan's framework profile)"
            if fp8_recipe and fp8_recipe != "none"
            else "# fp8 recipe: delayed scaling (default; the plan's framework profile is not known)",
        )
    given = dict(pairs)
    for key, value in pairs:
        if key.startswith(("comm_overlap.", "mixed_precision")):
            continue
        text = f"AttnBackend.{value}" if key == "model.attention_backend" else repr(value)
        lines.append(f"cfg.{key} = {text}")
    lines.append(f"cfg.mixed_precision = {MP_CALL}({given['mixed_precision']!r})")
    lines += [f"cfg.{k} = {v!r}" for k, v in pairs if k.startswith("mixed_precision.")]
    args = ", ".join(
        f"{k.split('.', 1)[1]}={v!r}" for k, v in pairs if k.startswith("comm_overlap.")
    )
    lines.append(f"cfg.comm_overlap = {CO_CALL}({args})")
    env = nemo.environment_lines(given, context, NAME, "Megatron-Bridge's")
    return "\n".join(lines + env) + "\n"


def _call(value: str, name: str, where: str) -> ast.Call:
    """The call ``name(...)`` of literal arguments an assignment's value is (refused otherwise)."""
    try:
        node = ast.parse(value, mode="eval").body
    except SyntaxError:
        node = None
    if not (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name
    ):
        raise ExportRefused(f"megatron-bridge: cfg.{where} = {value!r} is not {name}(...)")
    return node


def _literal(node: ast.AST, where: str) -> object:
    """The literal value of an argument of a call; refused when it is not one."""
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError):
        raise ExportRefused(f"megatron-bridge: cfg.{where} is not a literal") from None


def read_overrides(text: str) -> tuple[dict[str, object], int | None]:
    """({ConfigContainer path: value}, the torchrun process count or None) of the lines
    :func:`export` writes; refuses a line of another form, an unknown field or a value not a literal."""
    launch = LAUNCH.search(text)
    gpus = int(launch.group(1)) * int(launch.group(2)) if launch else None
    return read_override_file(text, NAME, "cfg", _config_call), gpus


def _config_call(line: str, assigned, v: dict) -> bool:
    """Read a ``cfg.comm_overlap = CommOverlapConfig(...)`` or ``cfg.mixed_precision =
    get_mixed_precision_config(...)`` line into ``v`` (common.read_override_file's own form); False
    for any other line."""
    if assigned is None or assigned[0] not in ("comm_overlap", "mixed_precision"):
        return False
    key, value = assigned
    if key == "comm_overlap":
        for kw in _call(value, CO_CALL, key).keywords:
            v[f"comm_overlap.{kw.arg}"] = _literal(kw.value, f"comm_overlap.{kw.arg}")
    else:
        args = _call(value, MP_CALL, key).args
        v[key] = _literal(args[0], key) if len(args) == 1 else None
    return True


def _nemo_key(key: str) -> str:
    """The NeMo 2.0 recipe path of a ConfigContainer path (PREFIXES read backwards; a model field is
    MegatronStrategy's when NeMo's strategy takes it, the model config's otherwise)."""
    if key.startswith("model."):
        field = key.split(".", 1)[1]
        strategy = "trainer.strategy." + field
        return strategy if strategy in framework_args(nemo.NAME).names else "model.config." + field
    for old, new in PREFIXES:
        if key == new or (new.endswith(".") and key.startswith(new)):
            return old + key[len(new) :]
    raise ExportRefused(f"megatron-bridge: cfg.{key} has no plan field")


def import_plan(text: str) -> dict[str, object]:
    """PlanSpec fields from the lines :func:`export` writes (or the same forms by hand): the fields
    renamed to NeMo's recipe paths and read as NeMo's import reads them (export.nemo.plan_fields)."""
    v, gpus = read_overrides(text)
    if gpus is None:
        raise ExportRefused(
            "megatron-bridge: the '# launch: torchrun --nnodes=N --nproc-per-node=M' line is missing;"
            " paraplan needs it to rebuild the plan"
        )
    recipe = str(v.pop("mixed_precision", None) or "").replace("-", "_")
    if recipe not in (*PRECISION.values(), *FP8_RECIPES.values()):
        raise ExportRefused(
            f"megatron-bridge: cfg.mixed_precision {recipe or None!r} has no plan field (allowed:"
            f" {', '.join((*PRECISION.values(), *FP8_RECIPES.values()))})"
        )
    out: dict[str, object] = {"trainer.num_nodes": 1, "trainer.devices": gpus}
    out["trainer.plugins.precision"] = "16-mixed" if recipe == "fp16_mixed" else "bf16-mixed"
    out["trainer.strategy.ddp.grad_reduce_in_fp32"] = recipe != "fp16_mixed"  # the recipes' values
    fp8_params = read_precision(recipe, v)  # pops the mixed_precision fields it reads
    if recipe in FP8_RECIPES.values():  # the plan's dtype fp8; PlanSpec carries no recipe
        out |= {"trainer.plugins.fp8": "hybrid", "trainer.plugins.fp8_param_gather": fp8_params}
    tp_overlap = bool(v.pop("comm_overlap.tp_comm_overlap", False))
    if v.pop("ddp.use_megatron_fsdp", False):
        out["trainer.strategy.fsdp"] = "megatron"
    v.pop("checkpoint.ckpt_format", None)
    backend = v.pop("model.moe_flex_dispatcher_backend", "deepep")
    if v.get("model.moe_token_dispatcher_type") == "flex":
        if backend not in ("deepep", "hybridep"):
            raise ExportRefused(
                f"megatron-bridge: cfg.model.moe_flex_dispatcher_backend {backend!r} has no plan field"
            )
        if backend == "deepep":
            out["model.config.moe_enable_deepep"] = True
        else:
            out["model.config.moe_flex_dispatcher_backend"] = backend
    for key, value in v.items():
        out[_nemo_key(key)] = value
    return nemo.plan_fields(out, tp_overlap)
