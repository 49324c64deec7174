"""JSON Schemas of the input files (``paraplan schema NAME``), generated from the pydantic models.

``model``, ``system`` and ``plan`` are the specs themselves; ``validation-case`` is a case file of
``paraplan validate --cases`` (MISSION.md, "Validation-case schema"), described by
:class:`ValidationCaseFile` below; ``cluster`` appears when ``paraplan.specs.cluster`` defines a
``ClusterSpec``. Two things are adjusted in the generated schemas so that editors and validators
accept exactly what paraplan accepts:

- quantities accept unit strings ("80 GiB", "3.35 TB/s") as well as SI numbers (the specs parse
  them before validation), and say which units;
- numeric bounds pydantic leaves in its own words inside mappings (``gt``, ``ge``) are written as
  JSON Schema keywords (``exclusiveMinimum``, ``minimum``).
"""

from __future__ import annotations

import inspect
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import GenerateJsonSchema

from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec
from paraplan.specs.strict import InputModel
from paraplan.specs.system import SystemSpec
from paraplan.units import ALLOWED_UNITS

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _measured(description: str) -> Any:
    """A field of Measured: a positive figure, or None where the source does not state it."""
    return Field(None, gt=0, description=description)


class Measured(InputModel):
    """Published measurements of one run; memory per GPU on the first pipeline stage, in GiB."""

    step_time_s: float | None = _measured("seconds per training step")
    weights_and_optimizer_gib: float | None = _measured("weights, gradients, optimizer state")
    activations_gib: float | None = _measured("activations kept for backward")
    peak_memory_gib: float | None = _measured("peak memory per GPU")
    peak_allocated_gib: float | None = _measured(
        "peak of the caching allocator's allocated bytes (torch.cuda.max_memory_allocated): "
        "the peak without the CUDA context, communication buffers and fragmentation"
    )
    peak_reserved_gib: float | None = _measured(
        "peak of the caching allocator's reserved bytes (torch.cuda.max_memory_reserved): "
        "the allocated peak plus cached free blocks, without the CUDA context and communication buffers"
    )
    # documentation metrics (validate.case_files.DOC_METRICS): quoted beside the compared figures, not compared
    tflops_per_gpu: float | None = _measured("documentation only: model TFLOP/s per GPU")
    tokens_per_s_per_gpu: float | None = _measured("documentation only: tokens/s per GPU")
    mfu: float | None = _measured("documentation only: model FLOP utilisation")


class ValidationCase(BaseModel):
    """One published measurement: the run's model, system and plan, and what was measured."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="unique within its file")
    source: str = Field(description="where the figures come from (paper, table, page)")
    model: str | ModelSpec = Field(description="a catalog name or the model's fields")
    system: str | SystemSpec = Field(description="a catalog name or the system's fields")
    plan: PlanSpec
    measured: Measured
    framework: str | None = Field(
        None, description="framework profile of the run (the fidelity issue's profiles)"
    )
    framework_overrides: dict[str, Any] | None = Field(
        None,
        description="profile fields where the case's recipe departs from its framework profile "
        "(validate.case_files.case_profile)",
    )
    gpus_per_domain_used: int | None = Field(
        None,
        gt=0,
        description="GPUs of each NVLink domain the run's launcher placed its ranks on, where it fills only "
        "part of a domain (validate.case_files.job_system); None: whole domains",
    )
    scope: str | None = Field(None, description="which memory a figure counts")
    quote: Any = Field(None, description="documentation only: the quoted source text")
    notes: Any = Field(None, description="documentation only")
    group: Any = Field(None, description="documentation only")
    tier: Any = Field(None, description="documentation only")
    confidence: Any = Field(None, description="documentation only")
    derived: Any = Field(None, description="documentation only: which figures are derived, and how")
    record: Any = Field(None, description="documentation only: the source's record of the run")
    config_id: Any = Field(None, description="documentation only: the source's configuration id")


class ValidationCaseFile(BaseModel):
    """A file of ``paraplan validate --cases FILE``: ``{"cases": [CASE, ...]}`` (JSON or YAML)."""

    model_config = ConfigDict(extra="forbid")

    cases: list[ValidationCase]
    source_file: str | None = Field(
        None, description="documentation: the reference file the cases were taken from"
    )


def _cluster_model() -> type[BaseModel] | None:
    try:
        from paraplan.specs.cluster import ClusterSpec  # type: ignore[import-not-found]
    except ImportError:
        return None
    return ClusterSpec


def schema_models() -> dict[str, type[BaseModel]]:
    """Schema name -> pydantic model, in the order ``paraplan schema`` lists them."""
    out: dict[str, type[BaseModel]] = {"model": ModelSpec, "system": SystemSpec, "plan": PlanSpec}
    cluster = _cluster_model()
    if cluster is not None:
        out["cluster"] = cluster
    out["validation-case"] = ValidationCaseFile
    return out


def _quantity_kind(function) -> str | None:
    """The units kind of a specs quantity parser (a closure over ``kind``), else None."""
    try:
        kind = inspect.getclosurevars(function).nonlocals.get("kind")
    except TypeError:
        return None
    return kind if isinstance(kind, str) and kind in ALLOWED_UNITS else None


class _Generator(GenerateJsonSchema):
    """Quantities: a number (SI) or a string with units."""

    def function_before_schema(self, schema):
        inner = super().function_before_schema(schema)
        kind = _quantity_kind(schema["function"]["function"])
        if kind is None or kind == "count":
            return inner
        text = {"type": "string", "description": f"a quantity with units: {ALLOWED_UNITS[kind]}"}
        return {"anyOf": [inner, text]}


_BOUNDS = {"gt": "exclusiveMinimum", "ge": "minimum", "lt": "exclusiveMaximum", "le": "maximum"}
_NUMERIC = ("number", "integer")


def _standard_keywords(node):
    """pydantic's ``gt``/``ge``/``lt``/``le`` as JSON Schema keywords; bounds on a number-or-string
    (``anyOf``) quantity moved onto its number branch."""
    if isinstance(node, list):
        return [_standard_keywords(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _standard_keywords(v) for k, v in node.items()}
    bounds = {
        _BOUNDS.get(k, k): out.pop(k)
        for k in list(out)
        if k in _BOUNDS or (k in _BOUNDS.values() and "anyOf" in out)
    }
    if "anyOf" in out:
        out["anyOf"] = [
            {**member, **bounds} if member.get("type") in _NUMERIC else member
            for member in out["anyOf"]
        ]
    elif "type" in out:
        out.update(bounds)
    else:
        out.update(
            {k: v for k, v in node.items() if _BOUNDS.get(k, k) in bounds}
        )  # leave as it was
    return out


def json_schema(name: str) -> dict:
    """The JSON Schema of input ``name`` (a key of :func:`schema_models`)."""
    model = schema_models()[name]
    schema = _standard_keywords(model.model_json_schema(schema_generator=_Generator))
    return {"$schema": DIALECT, "$id": f"paraplan:{name}", **schema}
