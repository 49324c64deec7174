"""Export a plan as the launch arguments of Megatron-LM, NeMo 2.0, Megatron-Bridge, torchtitan and DeepSpeed, read
them back, and read plans from files (``search --json`` output, exports, hand-written plans)."""

from __future__ import annotations

from pathlib import Path

from paraplan.export import deepspeed, megatron, megatron_bridge, nemo, torchtitan
from paraplan.export.common import FRAMEWORKS, ExportRefused, canonical_plan, framework_args
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec

__all__ = [
    "FRAMEWORKS",
    "ExportRefused",
    "canonical_plan",
    "export_plan",
    "framework_args",
    "import_plan",
    "launch_targets",
    "SUFFIX",
]

SUFFIX = {
    "megatron": ".sh",
    "nemo": ".py",
    "megatron-bridge": ".py",
    "torchtitan": ".toml",
    "deepspeed": ".json",
}


def export_plan(
    framework: str,
    plan: PlanSpec,
    model: ModelSpec | None = None,
    gpus_per_node: int = 8,
    header: str = "",
    fp8_recipe: str | None = None,
) -> str:
    """The plan as ``framework`` takes it (text); ``fp8_recipe``: the fp8 recipe of the framework profile
    the plan was priced with (Megatron-Bridge writes its recipe; None: delayed scaling); :class:`ExportRefused` names a knob it cannot express,
    InputError a model the uniform plan does not describe (specs.rules.uniform_model_violations: encoder-decoders)."""
    if model is not None:
        from paraplan.specs.errors import InputError
        from paraplan.specs.rules import uniform_model_violations

        if broken := uniform_model_violations(model):
            raise InputError.from_violations(broken)
    if framework == "megatron":
        return megatron.export(plan, model, gpus_per_node, header)
    if framework == "nemo":
        return nemo.export(plan, gpus_per_node, header, model)
    if framework == "megatron-bridge":
        return megatron_bridge.export(plan, gpus_per_node, header, model, fp8_recipe)
    if framework == "torchtitan":
        return torchtitan.export(plan, model, header)
    if framework == "deepspeed":
        return deepspeed.export(plan)
    raise ExportRefused(
        f"framework: {framework!r} is not allowed; allowed: {', '.join(FRAMEWORKS)}"
    )


def launch_targets(plan: PlanSpec, model: ModelSpec | None = None) -> list[str]:
    """The frameworks whose export of ``plan`` is written (every knob expressed, every kept start-up
    check passing); the others refuse it. What ``search`` reports per row without ``--framework``."""
    from paraplan.specs.errors import InputError

    out = []
    for name in FRAMEWORKS:
        try:
            export_plan(name, plan, model)
        except InputError:  # ExportRefused, or a model the uniform plan does not describe
            continue
        out.append(name)
    return out


def import_plan(
    framework: str, text: str, model: ModelSpec | None = None, seq_length: int | None = None
) -> dict:
    """PlanSpec fields read back from an export of ``framework``."""
    if framework == "megatron":
        return megatron.import_plan(text)
    if framework == "nemo":
        return nemo.import_plan(text)
    if framework == "megatron-bridge":
        return megatron_bridge.import_plan(text)
    if framework == "torchtitan":
        return torchtitan.import_plan(text, model)
    if framework == "deepspeed":
        return deepspeed.import_plan(text, seq_length)
    raise ExportRefused(
        f"framework: {framework!r} is not allowed; allowed: {', '.join(FRAMEWORKS)}"
    )


def detect_framework(path: Path, text: str) -> str | None:
    """Which framework wrote ``text`` (by content, then suffix); None for a paraplan plan/search file."""
    if "--tensor-model-parallel-size" in text or "pretrain_gpt.py" in text:
        return "megatron"
    if "cfg.train.global_batch_size" in text or "Megatron-Bridge ConfigContainer" in text:
        return "megatron-bridge"
    if "recipe.trainer." in text:
        return "nemo"
    if path.suffix == ".toml" or "[parallelism]" in text:
        return "torchtitan"
    if '"train_batch_size"' in text or '"train_micro_batch_size_per_gpu"' in text:
        return "deepspeed"
    return None
