"""Read one plan from a file: ``search --json`` output (a chosen rank), ``estimate --json`` output,
a framework export (Megatron launch line, NeMo override, torchtitan TOML, DeepSpeed JSON), or a
hand-written JSON/YAML of PlanSpec fields (optionally under a ``plan`` key).

``FILE#N`` picks rank N of a search result (default: rank 1)."""

from __future__ import annotations

from pathlib import Path

from paraplan.io.fields import Doc
from paraplan.io.documents import parse_document, read_text
from paraplan.specs.errors import InputError
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec, plan_only_violations, plan_violations


def split_ref(ref: str, rank: int | None = None) -> tuple[Path, int | None]:
    """'FILE#3' -> (FILE, 3); an explicit ``rank`` wins over none in the reference."""
    path, sep, tail = ref.rpartition("#")
    if sep and tail.isdigit() and path:
        if rank is not None and rank != int(tail):
            raise InputError(f"--plan: {ref!r} names rank {tail} but --rank is {rank}")
        return Path(path), int(tail)
    return Path(ref), rank


def _pick_rank(data: Doc, rank: int | None, field: str) -> dict:
    plans = data.docs("plans", [])
    if not plans:
        raise InputError(f"{field}: the search result holds no plans (nothing fit)")
    want = rank or 1
    for row in plans:
        if row.get("rank", None) == want:
            return row.doc("plan").data
    raise InputError(
        f"{field}: rank {want} is not allowed; the search result has ranks 1-{len(plans)}"
    )


def plan_fields_from_text(
    path: Path,
    text: str,
    rank: int | None = None,
    *,
    model: ModelSpec | None = None,
    seq_length: int | None = None,
    field: str = "--plan",
) -> dict:
    """PlanSpec fields from a file's text (see the module docstring for the formats)."""
    from paraplan.export import detect_framework, import_plan

    framework = detect_framework(path, text)
    if framework is not None:
        if rank not in (None, 1):
            raise InputError(
                f"{field}: a {framework} export holds one plan; rank {rank} is not allowed"
            )
        return import_plan(framework, text, model=model, seq_length=seq_length)
    data = Doc(parse_document(text, repr(str(path)), field, as_json=path.suffix == ".json"), field)
    if "plans" in data:
        return dict(_pick_rank(data, rank, field))
    if rank not in (None, 1):
        raise InputError(f"{field}: {str(path)!r} holds one plan; rank {rank} is not allowed")
    plan = data.doc("plan") if "plan" in data else data
    return {
        k: v for k, v in plan.data.items() if k not in ("model", "system")
    }  # documentation beside a plan


# degrees from which PlanSpec infers dp: overriding one of them drops the file's dp (re-inferred)
DP_DEGREES = ("gpus", "tp", "pp", "cp")


def with_overrides(fields: dict, overrides: dict | None) -> dict:
    """The file's plan fields with ``overrides`` (field: value) on top; when an override changes
    gpus / tp / pp / cp and does not give dp, the file's dp is dropped so that it is inferred again
    (also the rule of ``api.estimate``'s keyword overrides of a PlanSpec)."""
    if not overrides:
        return fields
    out = dict(fields)
    if "dp" not in overrides and set(overrides) & set(DP_DEGREES):
        out.pop("dp", None)
    out.update(overrides)
    return out


def load_plan(
    ref: str,
    rank: int | None = None,
    *,
    model: ModelSpec | None = None,
    seq_length: int | None = None,
    field: str = "--plan",
    overrides: dict | None = None,
) -> PlanSpec:
    """The validated plan named by ``ref`` (``FILE`` or ``FILE#RANK``), with ``overrides`` (plan
    field: value) applied on top of the file's fields (``with_overrides``)."""
    from paraplan.specs.plan_fields import plan_from_fields

    path, rank = split_ref(ref, rank)
    text = read_text(path, field)
    fields = plan_fields_from_text(
        path, text, rank, model=model, seq_length=seq_length, field=field
    )
    return plan_from_fields(with_overrides(fields, overrides))


def check_loaded_plan(plan: PlanSpec, model: ModelSpec | None, field: str) -> PlanSpec:
    """The plan, when it keeps the rules the estimator checks (specs.plan.plan_violations with the
    model; without one, those that read no model, plan_only_violations); else InputError naming
    ``field`` and each broken plan field (issue 37: export and import wrote and read invalid plans)."""
    violations = plan_violations(plan, model) if model is not None else plan_only_violations(plan)
    if violations:
        raise InputError(f"{field}: {InputError.from_violations(violations)}", tuple(violations))
    return plan


def source_names(ref: str) -> tuple[str | None, str | None]:
    """(model, system) named in an ``estimate --json`` file (top level) or a ``search --json`` file (its
    ``problem``), to default --model/--system; else Nones."""
    data = _document(ref)
    if data is None:
        return None, None
    where = data if ("model" in data or "system" in data) else data.get("problem")
    if not isinstance(where, dict):
        return None, None
    name = lambda v: v.get("name") if isinstance(v, dict) else v if isinstance(v, str) else None  # noqa: E731
    return name(where.get("model")), name(where.get("system"))


def source_framework(ref: str) -> str | None:
    """The framework profile a ``search --json`` file's problem was searched with (None otherwise)."""
    data = _document(ref)
    problem = data.get("problem") if data is not None else None
    value = problem.get("framework") if isinstance(problem, dict) else None
    return value if isinstance(value, str) else None


def _document(ref: str) -> dict | None:
    """The JSON object of a plan file reference, None when it is not one (load_plan reports that)."""
    path, _ = split_ref(ref)
    try:
        data = parse_document(read_text(path, "PLAN"), repr(str(path)), "PLAN", as_json=True)
    except InputError:  # not JSON (an export, a YAML plan) or unreadable: load_plan reports it
        return None
    return data if isinstance(data, dict) else None


def load_plan_option(
    ref: str, model: ModelSpec, seq_length: int, overrides: dict | None = None
) -> PlanSpec:
    """``estimate --plan FILE``: the plan in the file, with the plan options given on the command
    line (``overrides``, plan field: value) applied on top; a DeepSpeed config takes --seq-length."""
    return load_plan(ref, model=model, seq_length=seq_length, overrides=overrides)
