"""The problem ``api.search`` and ``paraplan search`` search, and the system it prices plans on, in one
order written once here (issue 31, "two paths, one number"): a row the search returns re-estimates
(``estimate --framework F --set ...`` with the row's plan) to the same step time and peak memory."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from paraplan.search.headroom import with_headroom
from paraplan.search.space import SearchProblem
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import runtime_folded
from paraplan.specs.system import SystemSpec

if TYPE_CHECKING:
    from paraplan.cost.frameworks import Overrides

# the SearchProblem fields that hold a tuple of allowed values (search accepts a list or one value)
TUPLE_FIELDS = (
    "tp pp cp micro_batch recompute zero sequence_parallel schedules tp_layouts ep etp dispatchers"
).split()


class SearchSetup(NamedTuple):
    """What :func:`search_setup` returns: the problem and the HBM before the memory headroom."""

    problem: SearchProblem
    full_hbm_bytes: float


def search_specs(
    model_spec: ModelSpec,
    system_spec: SystemSpec,
    profile=None,
    overrides: Overrides | None = None,
    memory_headroom: float = 0.0,
) -> tuple[ModelSpec, SystemSpec, float]:
    """(the model, the system a search prices plans on, its HBM before the headroom): the specs of
    cost.frameworks.run_specs (the given ones, the framework ``profile``, then ``overrides``, the user's
    ``--set`` values, as ``estimate`` builds them), then the memory headroom (search.headroom.with_headroom:
    capacity × (1 − headroom)), last: it scales only the capacity a plan must fit in, never a term of the
    peak, so a row's peak is its estimate's."""
    from paraplan.cost.frameworks import run_specs

    model_spec, system_spec = run_specs(model_spec, system_spec, profile, overrides)
    full_hbm = system_spec.accelerator.hbm_capacity
    return model_spec, with_headroom(system_spec, memory_headroom), full_hbm


def search_setup(
    model_spec: ModelSpec,
    system_spec: SystemSpec,
    gpus: int,
    framework: Any = None,
    price_per_gpu_hour: float | None = None,
    *,
    memory_headroom: float = 0.0,
    overrides: Overrides | None = None,
    **space: Any,
) -> SearchSetup:
    """The :class:`~paraplan.search.space.SearchProblem` of ``api.search`` and ``paraplan search`` and
    the HBM before the headroom: ``space`` its further fields (allowed values as tuples, lists or one
    value: TUPLE_FIELDS); with ``framework`` (a profile, its name, file or dict) its attention (unless
    given) and overlap defaults; the specs those of :func:`search_specs` (the profile, ``overrides``,
    ``memory_headroom``); the price the resulting system's unless given."""
    profile = None
    if framework is not None:
        from paraplan.catalog import load_framework

        profile = load_framework(framework)
    model_spec, system_spec, full_hbm = search_specs(
        model_spec, system_spec, profile, overrides, memory_headroom
    )
    fields = _search_fields(space, profile)
    if price_per_gpu_hour is None:
        price_per_gpu_hour = system_spec.price_per_gpu_hour
    problem = SearchProblem(
        model=model_spec,
        system=system_spec,
        gpus=gpus,
        price_per_gpu_hour=price_per_gpu_hour,
        **fields,
    )
    return SearchSetup(problem, full_hbm)


def search_problem(*args: Any, **space: Any) -> SearchProblem:
    """The problem of :func:`search_setup` (its arguments; ``memory_headroom`` 0 unless given)."""
    return search_setup(*args, **space).problem


def _search_fields(space: dict, profile) -> dict:
    """The SearchProblem fields of ``space``: with a ``profile`` its attention (unless given), overlap
    defaults and run-wide knobs (cost.frameworks.framework_search_fields); allowed values as tuples
    (TUPLE_FIELDS); run-wide knobs by name into ``runtime``; other unknown names refused."""
    from paraplan.catalog import unknown_keyword

    fields = runtime_folded(space)
    if profile is not None:
        from paraplan.cost.frameworks import framework_search_fields

        fields = {"attention": profile.attention, **fields, **framework_search_fields(profile)}
    for key in TUPLE_FIELDS:
        value = fields.get(key)
        if value is not None and not isinstance(value, tuple):  # a list or one value
            fields[key] = tuple(value) if isinstance(value, (list, set)) else (value,)
    known = set(SearchProblem.__dataclass_fields__)
    error = unknown_keyword("search", fields, known - {"model", "system"}, "search field")
    if error is not None:
        raise error
    return fields
