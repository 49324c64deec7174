"""torchtitan's pipeline split: a plan's stages as ``parallelism.module_fqns_per_model_part``, and back.

torchtitan v0.2.2 splits a model over its pipeline stages in one of two ways
(``torchtitan/distributed/pipeline_parallel.py``): from ``pipeline_parallel_layers_per_stage`` with the
first / last stage weights (``generate_llm_fqn_per_model_part``, line 236: the embedding and the output
counted as layers, the extra layers to the earliest stages), or from ``module_fqns_per_model_part``
(line 117), the module names of every model part, which it uses as given. Model part k runs on rank
k mod pp in the looped schedules (``pipeline_module_split``, ``_get_stage_indices``, line 451: part
s + v·pp is chunk v of rank s), as paraplan numbers chunk v of stage s. The module names are those
``generate_llm_fqn_per_model_part`` writes for torchtitan's language models: ``tok_embeddings``,
``layers.<i>``, ``norm`` and ``output``.

A plan with the even default split (no split field, the layers dividing over pp·vpp) is written as
``pipeline_parallel_layers_per_stage``; any other split (``layers_first_stage`` /
``layers_last_stage``, ``embedding_as_layer`` / ``loss_as_layer``, ``stage_layers``, an uneven default
split such as 61 layers over 8 stages) as its model parts: each stage's layers (specs.split, the
plan's split) cut into vpp chunks as specs.split.chunk_layer_counts does for a split given stage by
stage, so the export states the plan as explicit ``stage_layers`` (``written_plan``), the form import
reads back.
"""

from __future__ import annotations

from paraplan.export.common import ExportRefused
from paraplan.export.megatron_core import (
    chunks_in_model_order,
    explicit_stages_plan,
    stages_of_chunks,
)
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec
from paraplan.specs.rules import model_parts_rule
from paraplan.specs.split import chunk_layer_counts, stage_layer_counts

SPLIT_FIELDS = ("stage_layers", "layers_first_stage", "layers_last_stage")
SPLIT_SWITCHES = ("embedding_as_layer", "loss_as_layer")
FIRST, LAST = ["tok_embeddings"], ["norm", "output"]


def split_given(plan: PlanSpec) -> bool:
    """Does the plan set its split (a split field or an accounting switch)?"""
    return any(getattr(plan, f) is not None for f in SPLIT_FIELDS) or any(
        getattr(plan, f) for f in SPLIT_SWITCHES
    )


def writes_parts(plan: PlanSpec, model: ModelSpec | None) -> bool:
    """Is the plan's split written as model parts (module doc) rather than layers_per_stage?"""
    if plan.pp == 1 or model is None:
        return False
    return split_given(plan) or model.layers % (plan.pp * plan.vpp) != 0


def stage_counts(plan: PlanSpec, model: ModelSpec) -> list[int]:
    """Decoder layers of each pipeline stage under the plan's split (specs.split)."""
    return stage_layer_counts(plan.split(model.layers, model.mtp_layers))


def written_plan(plan: PlanSpec, model: ModelSpec | None) -> PlanSpec:
    """The plan as a torchtitan export states it: where model parts are written, its stage counts
    explicit and no split switches (the parts replace them), which is the same split."""
    if not writes_parts(plan, model):
        return plan
    return explicit_stages_plan(plan, stage_counts(plan, model))  # type: ignore[arg-type]


def model_parts(plan: PlanSpec, model: ModelSpec) -> list[list[str]]:
    """``module_fqns_per_model_part`` of the plan's split: part v·pp + s holds chunk v of stage s
    (module doc), the layers numbered in model order through the parts; refuses a part left empty."""
    vpp = plan.vpp
    stages = stage_counts(plan, model)
    if rule := model_parts_rule(stages, vpp):
        raise ExportRefused(f"plan.vpp={vpp}: {rule}; not written")
    counts = chunks_in_model_order(chunk_layer_counts(stages, vpp))
    parts, layer = [], 0
    for k, n in enumerate(counts):
        part = [f"layers.{i}" for i in range(layer, layer + n)]
        layer += n
        parts.append((FIRST if k == 0 else []) + part + (LAST if k == len(counts) - 1 else []))
    return parts


def read_parts(parts: object, pp: int, model: ModelSpec | None) -> tuple[tuple[int, ...], int]:
    """(stage_layers, vpp) of ``module_fqns_per_model_part`` written as ``model_parts`` writes it:
    the embedding, every layer in order, the norm and the output, pp·vpp parts whose chunks are those
    chunk_layer_counts gives their stages; anything else is refused by name (a hand-made split)."""
    where = "torchtitan: parallelism.module_fqns_per_model_part"
    if not isinstance(parts, list) or not all(
        isinstance(p, list) and all(isinstance(n, str) for n in p) for p in parts
    ):
        raise ExportRefused(f"{where} must be a list of lists of module names")
    if not parts or len(parts) % pp:
        raise ExportRefused(f"{where}: {len(parts)} parts do not divide over pp={pp} ranks")
    names = [n for p in parts for n in p]
    layers = sum(n.startswith("layers.") for n in names)
    expected = FIRST + [f"layers.{i}" for i in range(layers)] + LAST
    if names != expected or parts[0][:1] != FIRST or parts[-1][-2:] != LAST:
        raise ExportRefused(
            f"{where}: a hand-made split (modules other than tok_embeddings, layers.0 .. in order, "
            "norm and output) has no paraplan plan"
        )
    if model is not None and layers != model.layers:
        raise ExportRefused(f"{where} holds {layers} layers; the model has {model.layers}")
    vpp = len(parts) // pp
    counts = [sum(n.startswith("layers.") for n in p) for p in parts]
    stages = stages_of_chunks(counts, pp)
    if counts != chunks_in_model_order(chunk_layer_counts(list(stages), vpp)):
        raise ExportRefused(
            f"{where}: chunks of {counts} layers per part are not a split a plan holds (each stage's "
            "layers cut as evenly as they go, the earlier chunks fuller)"
        )
    return stages, vpp
