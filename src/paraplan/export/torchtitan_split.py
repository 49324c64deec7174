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
plan's split) cut into vpp chunks by specs.split.model_part_layers with the embedding and loss units
the plan counts, the chunks Megatron-LM's pipeline layout runs and step.layout prices (DeepSeek-V3's
'Et|tt|..' at PP 8 × VP 4: the first part tok_embeddings and one layer, the others two). The
exporter and the search (specs.rules.model_parts_rule) read that one function. A part may hold only
tok_embeddings (the first) or norm and output (the last), as torchtitan's own
generate_llm_fqn_per_model_part writes them (lines 311, 333). Import reads the split back
(``split_fields``): explicit ``stage_layers`` when the chunks are those of no units, else the
accounted default split; ``written_plan`` is what an export reads back as.
"""

from __future__ import annotations

from paraplan.export.common import ExportRefused
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec
from paraplan.specs.rules import even_share, model_parts_rule
from paraplan.specs.split import (
    accounted_units,
    model_part_layers,
    stage_layer_counts,
    stages_of_chunks,
)

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


def units(plan: PlanSpec, model: ModelSpec | None) -> tuple[int, int]:
    """(embedding units, loss units) the plan counts in its first / last chunk (specs.split.accounted_units):
    the units Megatron-LM's layout and step.layout price the chunks with."""
    mtp = model.mtp_layers if model is not None else 0
    return accounted_units(plan.embedding_units, plan.loss_units, mtp)


def part_counts(plan: PlanSpec, model: ModelSpec) -> list[int]:
    """Decoder layers of each model part in model order (specs.split.model_part_layers, the function
    specs.rules.model_parts_rule reads); refuses a part left without a module."""
    stages, units_ = stage_counts(plan, model), units(plan, model)
    if rule := model_parts_rule(stages, plan.vpp, *units_):
        raise ExportRefused(f"plan.vpp={plan.vpp}: {rule}; not written")
    return model_part_layers(stages, plan.vpp, *units_)


def written_plan(plan: PlanSpec, model: ModelSpec | None) -> PlanSpec:
    """The plan as a torchtitan export states it (what import reads back): where model parts are
    written, the split ``split_fields`` reads from them."""
    if not writes_parts(plan, model):
        return plan
    fields = split_fields(part_counts(plan, model), plan.pp, model)  # type: ignore[arg-type]
    return plan.model_copy(update=fields)


def model_parts(plan: PlanSpec, model: ModelSpec) -> list[list[str]]:
    """``module_fqns_per_model_part`` of the plan's split: part v·pp + s holds chunk v of stage s
    (module doc), the layers numbered in model order through the parts."""
    counts = part_counts(plan, model)
    parts, layer = [], 0
    for k, n in enumerate(counts):
        part = [f"layers.{i}" for i in range(layer, layer + n)]
        layer += n
        parts.append((FIRST if k == 0 else []) + part + (LAST if k == len(counts) - 1 else []))
    return parts


def split_fields(counts: list[int], pp: int, model: ModelSpec | None) -> dict[str, object]:
    """The plan's split fields (vpp, stage_layers, embedding_as_layer, loss_as_layer) of model parts
    holding ``counts`` decoder layers each: the chunks chunk_layer_counts cuts the stages into with
    no units (explicit ``stage_layers``), else with the embedding / loss counted (the accounted
    default split those switches give, as a search row states it); any other split is refused."""
    where = "torchtitan: parallelism.module_fqns_per_model_part"
    vpp = len(counts) // pp
    stages = stages_of_chunks(counts, pp)
    mtp = model.mtp_layers if model is not None else 0
    layers = sum(stages)
    fields: dict[str, object] = {"vpp": vpp, "layers_first_stage": None, "layers_last_stage": None}
    for e, l in ((0, 0), (1, 1), (1, 0), (0, 1)):  # the fullest accounting first on a tie
        fields |= {"embedding_as_layer": bool(e), "loss_as_layer": bool(l)}
        units_ = accounted_units(e, l, mtp)
        if counts != model_part_layers(list(stages), vpp, *units_):
            continue
        if (e, l) == (0, 0):
            return fields | {"stage_layers": stages}
        # the default split of a plan with these switches (PlanSpec.split; no other field read)
        default = PlanSpec.model_construct(pp=pp, embedding_as_layer=bool(e), loss_as_layer=bool(l))
        if stage_layer_counts(default.split(layers, mtp)) == list(stages):
            return fields | {"stage_layers": None}
    raise ExportRefused(
        f"{where}: chunks of {counts} layers per part are not a split a plan holds (each stage's "
        "layers cut as evenly as they go, the earlier chunks fuller, the embedding / loss counted "
        "only with their default split)"
    )


def read_parts(parts: object, pp: int, model: ModelSpec | None) -> dict[str, object]:
    """The split fields (``split_fields``) of ``module_fqns_per_model_part`` written as
    ``model_parts`` writes it: the embedding, every layer in order, the norm and the output, pp·vpp
    parts, none without a module; anything else is refused by name (a hand-made split)."""
    where = "torchtitan: parallelism.module_fqns_per_model_part"
    if not isinstance(parts, list) or not all(
        isinstance(p, list) and all(isinstance(n, str) for n in p) for p in parts
    ):
        raise ExportRefused(f"{where} must be a list of lists of module names")
    if not parts or not even_share(len(parts), pp):
        raise ExportRefused(f"{where}: {len(parts)} parts do not divide over pp={pp} ranks")
    if not all(parts):
        raise ExportRefused(f"{where}: a model part without modules has no paraplan plan")
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
    counts = [sum(n.startswith("layers.") for n in p) for p in parts]
    return split_fields(counts, pp, model)
