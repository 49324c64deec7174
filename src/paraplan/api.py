"""Thin Python API: the same entry points as the CLI, returning plain data objects.

>>> from paraplan.api import estimate, search
>>> est = estimate("llama3-8b", "dgx-h100-80gb", gpus=8, zero=1, seq_length=8192)
>>> round(est.mfu, 2)  # doctest: +SKIP
>>> found = search("gpt3-13b", "dgx-a100-80gb", gpus=64, global_batch=512, top=5)
>>> found.best.plan, found.to_dataframe()  # doctest: +SKIP

Models and systems may be catalog names, paths to YAML/JSON files or dicts (a model's may also be
a Hugging Face ``config.json``), or already-built specs. Plan fields are :class:`PlanSpec` fields;
``seq_length`` and ``global_batch`` get the CLI's defaults when omitted (see :func:`plan_from_fields`).
Results: :class:`~paraplan.step.result.Estimate` and :class:`SearchResults` (ranked plans with
``to_dict``, ``to_records``, ``to_dataframe`` — pandas is optional — and a Jupyter view; an
Estimate's Jupyter view, report.frames.estimate_html, is registered with IPython when it runs);
:func:`plan_label` is the compact plan text of the tables; :func:`to_dataframe` takes estimates too.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paraplan.catalog import load_model, load_system, suggestions, unknown_keyword  # noqa: F401
from paraplan.search.choices import option_choices  # noqa: F401 (re-exported)
from paraplan.search.setup import TUPLE_FIELDS, search_problem, search_setup  # noqa: F401
from paraplan.step.estimate import estimate as _estimate
from paraplan.step.result import Estimate
from paraplan.specs.errors import InputError  # noqa: F401 (re-exported)
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec, plan_input_error, runtime_folded  # noqa: F401 (re-exported)
from paraplan.specs.plan_fields import (  # noqa: F401 (re-exported)
    DEFAULT_MICRO_BATCH,
    DEFAULT_SEQ_LENGTH,
    default_global_batch,
    plan_from_fields,
)
from paraplan.specs.rules import min_global_batch  # noqa: F401 (re-exported)
from paraplan.specs.limits import (  # noqa: F401 (re-exported for the page)
    MAX_GLOBAL_BATCH,
    MAX_GPUS,
    MAX_SEQ_LENGTH,
    MAX_TOP,
)
from paraplan.io.options import parse_price, parse_tokens  # noqa: F401 (re-exported for the page)
from paraplan.io.referenced import MAX_YAML_BYTES  # noqa: F401 (re-exported for the page)
from paraplan.search.space import PLAN_OBJECTIVES  # noqa: F401 (re-exported for the page)
from paraplan.search.staged import (  # noqa: F401 (re-exported for the page)
    AMP_SEARCH_AXES,
    CLUSTER_SEARCH_OPTIONS,
)
from paraplan.step.schedules import route_length, route_position  # noqa: F401
from paraplan.step.schedules import schedule_order, schedule_pairs  # noqa: F401
from paraplan.specs.system import SystemSpec


def estimate(
    model: str | Path | dict | ModelSpec,
    system: str | Path | dict | SystemSpec,
    plan: PlanSpec | dict | None = None,
    *,
    with_ops: bool = False,
    framework: str | dict | None = None,
    **plan_fields: Any,
) -> Estimate:
    """Estimate one plan. ``plan`` (a PlanSpec or dict) and keyword plan fields are merged, the
    keywords winning; ``framework`` (a catalog name such as "torchtitan", a file or a dict) fills the
    plan fields left unset and adapts the system (paraplan.cost.frameworks.apply_framework); raises
    :class:`~paraplan.specs.errors.InputError` on bad input."""
    if plan_fields and (
        error := unknown_keyword(
            "estimate", plan_fields, [*PlanSpec.model_fields, "with_ops", "framework"]
        )
    ):
        raise error
    model_spec, system_spec, plan_spec = _problem(model, system, plan, framework, plan_fields)
    return _estimate(model_spec, system_spec, plan_spec, with_ops=with_ops)


def _problem(
    model, system, plan, framework, plan_fields: dict
) -> tuple[ModelSpec, SystemSpec, PlanSpec]:
    """The specs of ``estimate``'s arguments (its docstring)."""
    from paraplan.export.planfile import with_overrides  # a degree changed: dp inferred again

    model_spec, system_spec = _specs(model, system)
    if isinstance(plan, PlanSpec) and not plan_fields and framework is None:
        return model_spec, system_spec, plan
    base = plan.model_dump(exclude_unset=True) if isinstance(plan, PlanSpec) else dict(plan or {})
    fields = with_overrides(base, plan_fields)
    if framework is not None:  # the system of cost.frameworks.run_specs, as every command builds it
        from paraplan.catalog import load_framework
        from paraplan.cost.frameworks import framework_plan_fields, run_specs

        profile = load_framework(framework)
        model_spec, system_spec = run_specs(model_spec, system_spec, profile)
        fields = framework_plan_fields(profile, fields)
    return model_spec, system_spec, plan_from_fields(fields)


def error_band(
    model: str | Path | dict | ModelSpec,
    system: str | Path | dict | SystemSpec,
    plan: PlanSpec | dict | None = None,
    *,
    framework: str | None = None,
    **plan_fields: Any,
):
    """The error band of :func:`estimate`'s step time for the same arguments
    (:class:`paraplan.validate.band.ErrorBand`: ``low_s``, ``high_s``, the claimed ``coverage_pct``, its
    ``basis``; ``to_dict()`` is ``error_band`` of ``paraplan estimate --json``): the one band rule of
    :func:`paraplan.validate.band.error_band`. ``framework`` is a catalog profile name."""
    from paraplan.validate.band import error_band as band_of

    model_spec, system_spec, plan_spec = _problem(model, system, plan, framework, plan_fields)
    step_time_s = _estimate(model_spec, system_spec, plan_spec).step_time_s
    return band_of(model_spec, system_spec, plan_spec, step_time_s, framework)


def validate(cases: Iterable[str | Path] | None = None) -> dict:
    """Run the bundled validation cases (or the given case files) and return the report dict
    ``{"cases": [...], "summary": {...}}`` (format in :mod:`paraplan.validate.run`), each case with its
    held-out error band and ``summary.band_coverage`` (:mod:`paraplan.validate.coverage`)."""
    from paraplan.validate.case_files import load_cases
    from paraplan.validate.coverage import with_bands
    from paraplan.validate.run import run_cases

    loaded = load_cases(cases)
    return with_bands(run_cases(loaded), loaded)


def plan_label(plan: PlanSpec | dict) -> str:
    """The compact plan text of the tables and CSV files: 'tp8 pp4 cp1 dp32 mb4 interleaved/v12 rc:none sp zero1'."""
    from paraplan.specs.plan_label import plan_text

    return plan_text(plan)


@dataclass(frozen=True)
class SearchResults:
    """What :func:`search` returns: the problem and the ranked plans (best first).

    ``plans`` are :class:`~paraplan.search.run.RankedPlan` s (rank, plan, estimate, objective);
    ``raw`` is the search's own result with its counts (candidates, evaluated, feasible)."""

    problem: Any  # paraplan.search.space.SearchProblem
    raw: Any  # paraplan.search.run.SearchResult
    full_hbm_bytes: float = 0.0  # the accelerator's HBM before the headroom (0: none kept)
    memory_headroom: float = 0.0
    time_to_train: dict | None = None  # a time-to-train objective's ranking (``--json``'s object)

    @property
    def plans(self) -> list:
        return self.raw.plans

    @property
    def best(self):
        """The best ranked plan, or None when no plan fits."""
        return self.raw.plans[0] if self.raw.plans else None

    def __len__(self) -> int:
        return len(self.raw.plans)

    def __iter__(self) -> Iterator:
        return iter(self.raw.plans)

    def __getitem__(self, index: int):
        return self.raw.plans[index]

    def to_records(self) -> list[dict]:
        """One flat record per ranked plan (report.frames.estimate_record) with its error band."""
        from paraplan.report.frames import search_records

        return search_records(self.raw.plans, self.problem)

    def to_dataframe(self):
        """The ranked plans as a pandas DataFrame (pandas is optional: pip install 'paraplan[pandas]')."""
        from paraplan.report.frames import to_dataframe

        return to_dataframe(self.to_records())

    def to_dict(self, tokens: float | None = None) -> dict:
        """The document of ``paraplan search --json`` (problem, objective, plans, counts, timing,
        the memory headroom, each plan's launching frameworks and uncertain fit); with ``tokens``
        (``--tokens``) each plan's run days and cost too."""
        from paraplan.report.search_view import search_document

        out = search_document(self.problem, self.raw, tokens)
        annotate_rows(out, self.problem, self.raw, self.full_hbm_bytes, self.memory_headroom)
        if self.time_to_train is not None:
            out["time_to_train"] = self.time_to_train
        return out

    def _title(self) -> str:
        p = self.problem
        batch = (
            f"global batch {p.global_batch}"
            if p.global_batch is not None
            else f"max global batch {p.max_global_batch}"
        )
        return f"{p.model.name} on {p.gpus} x {p.system.name}, seq {p.seq_length}, {batch}, objective {p.objective}"

    def __repr__(self) -> str:
        best = self.best
        if best is None:
            return (
                f"<SearchResults {self._title()}: no plan fits ({self.raw.evaluated:,} evaluated)>"
            )
        return (
            f"<SearchResults {self._title()}: {len(self)} plans; best {plan_label(best.plan)}, "
            f"step {best.estimate.step_time_s:.4g} s>"
        )

    def _repr_html_(self) -> str:
        from paraplan.report.frames import html_table

        return html_table(self.to_records(), caption=self._title())


def search(
    model: str | Path | dict | ModelSpec,
    system: str | Path | dict | SystemSpec,
    gpus: int,
    *,
    seq_length: int = DEFAULT_SEQ_LENGTH,
    global_batch: int | None = None,
    max_global_batch: int | None = None,
    top: int = 10,
    objective: str = "time",
    price_per_gpu_hour: float | None = None,
    exhaustive: bool = False,
    framework: str | dict | None = None,
    workers: int | None = None,
    progress=None,
    feasible_sink=None,
    memory_headroom: float | None = None,
    evaluated_sink=None,
    tokens: float | None = None,
    **space: Any,
) -> SearchResults:
    """The best plans that fit (``paraplan search``). ``model`` and ``system`` as for :func:`estimate`;
    exactly one of ``global_batch`` / ``max_global_batch``; ``space``: further
    :class:`~paraplan.search.space.SearchProblem` fields (dtype, attention, tp=(1, 2, 4), recompute=
    ("none", "full"), vary_offload=False, ...). The price defaults to the system's. ``framework`` (as
    for :func:`estimate`) adapts the system and sets the attention (unless given) and overlap defaults.
    ``workers``: processes (``paraplan search --workers``; None: one for ``exhaustive``, else the usable CPUs for a
    large block-by-block search, search.block_processes.auto_workers). ``progress(done, total, phase)``
    and ``feasible_sink(columns)`` (every feasible plan, batch by batch: the whole space is evaluated)
    are those of ``paraplan.search.run.search`` (``--csv-all``'s sink), and so is ``evaluated_sink(columns)``
    (the feasible plans the pruned search evaluates, the ranked ones among them; not with ``exhaustive``). ``memory_headroom``: the share
    of HBM kept free (``--memory-headroom``; None: search.headroom.DEFAULT_MEMORY_HEADROOM). A
    time-to-train objective needs ``tokens`` (search.time_to_train, default goodput inputs)."""
    from paraplan.search.exhaustive import exhaustive_search
    from paraplan.search.headroom import DEFAULT_MEMORY_HEADROOM
    from paraplan.search.run import search as run_search
    from paraplan.search.time_to_train import OBJECTIVES as TIME_TO_TRAIN

    headroom = DEFAULT_MEMORY_HEADROOM if memory_headroom is None else memory_headroom
    problem, full_hbm = search_setup(
        *_specs(model, system),
        gpus,
        framework,
        price_per_gpu_hour,
        memory_headroom=headroom,
        seq_length=seq_length,
        global_batch=global_batch,
        max_global_batch=max_global_batch,
        objective="time" if objective in TIME_TO_TRAIN else objective,
        **space,
    )
    if objective in TIME_TO_TRAIN:
        from paraplan.search.time_to_train import ranked_search

        if tokens is None:
            raise InputError(f"--objective: {objective} needs --tokens (the run length, e.g. 15T)")
        options = {"workers": workers, "progress": progress}
        result, info = ranked_search(problem, tokens, top, run_search, objective, **options)
        return SearchResults(problem, result, full_hbm, headroom, info)
    result = (
        exhaustive_search(problem, top_k=top, workers=workers, progress=progress)
        if exhaustive
        else run_search(
            problem,
            top_k=top,
            workers=workers,
            progress=progress,
            feasible_sink=feasible_sink,
            evaluated_sink=evaluated_sink,
        )
    )
    return SearchResults(problem, result, full_hbm, headroom)


def launch_targets_of(problem, result) -> list[list[str]]:
    """Per ranked plan, the frameworks paraplan exports it to (export.launch_targets: each knob
    expressed and the kept start-up checks passing)."""
    from paraplan.export import launch_targets

    return [launch_targets(r.plan, problem.model) for r in result.plans]


def annotate_rows(doc: dict, problem, result, full_hbm_bytes: float, headroom: float) -> None:
    """Add to a search document (report.search_view.search_document) the memory headroom and, per
    plan, the frameworks that launch it and whether its fit is uncertain (search.headroom)."""
    from paraplan.search.headroom import uncertain_fit
    from paraplan.units import GiB

    doc["problem"]["memory_headroom"] = headroom
    for row, targets in zip(doc["plans"], launch_targets_of(problem, result)):
        row["frameworks"] = targets
        row["uncertain_fit"] = uncertain_fit(row["peak_memory_gib"] * GiB, full_hbm_bytes, headroom)


def _specs(model, system) -> tuple[ModelSpec, SystemSpec]:
    """The model and system specs of a catalog name, a file path, a dict or a spec."""
    model_spec = load_model(str(model) if isinstance(model, Path) else model)
    return model_spec, load_system(str(system) if isinstance(system, Path) else system)


def to_dataframe(results) -> Any:
    """A pandas DataFrame of :class:`SearchResults`, an Estimate or a list of Estimates (one row per plan)."""
    from paraplan.report.frames import estimate_record, to_dataframe as frame

    if isinstance(results, SearchResults):
        return results.to_dataframe()
    items = [results] if isinstance(results, Estimate) else list(results)
    return frame([estimate_record(e) for e in items])


def register_jupyter_views() -> bool:
    """Show an Estimate as HTML in Jupyter (report.frames.estimate_html); True when registered (IPython
    running): the result type renders nothing itself, so IPython's HTML formatter is given it here."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return False
    from paraplan.report.frames import estimate_html

    shell.display_formatter.formatters["text/html"].for_type(Estimate, estimate_html)
    return True


def explain(results: SearchResults) -> list[dict]:
    """Why the best plan wins: each one-knob neighbour of it with its verdict, step time and reason
    (``paraplan search --explain``); empty when no plan fits."""
    from paraplan.search.explain import explain as explain_plan

    best = results.best
    if best is None:
        return []
    return [a.__dict__ for a in explain_plan(results.problem, best.plan, best.estimate)]


def export(
    plan: PlanSpec | dict,
    to: str = "megatron",
    model: str | Path | dict | ModelSpec | None = None,
    gpus_per_node: int = 8,
    header: str = "",
    framework: str | None = None,
) -> str:
    """The plan as a framework's launch arguments (``paraplan export --to``, ``--framework``: the profile
    the plan was priced with, whose fp8 recipe Megatron-Bridge writes); raises InputError naming a knob."""
    from paraplan.catalog import load_framework
    from paraplan.export import export_plan

    plan_spec = plan if isinstance(plan, PlanSpec) else plan_from_fields(dict(plan))
    model_spec = load_model(str(model) if isinstance(model, Path) else model) if model else None
    recipe = load_framework(framework, "framework").fp8_recipe if framework else None
    return export_plan(to, plan_spec, model_spec, gpus_per_node, header, recipe)


def catalog_names() -> dict[str, list[str]]:
    """The catalog's model, system and framework names (``paraplan catalog``)."""
    from paraplan.catalog import framework_names, model_names, system_names

    return {"models": model_names(), "systems": system_names(), "frameworks": framework_names()}


def spec_from_text(kind: str, text: str, name: str = "pasted", field: str | None = None):
    """A model (our schema or a Hugging Face config.json) or system (``kind``) from YAML/JSON text
    held in memory (nothing is read from disk); InputError of one line naming ``field``."""
    from paraplan.catalog import model_from_data

    field = field or kind
    data = _pasted(text, field)
    if kind == "model":
        return model_from_data(data, name, field)
    data.setdefault("name", name)
    return load_system(data, field)


def _pasted(text: str, field: str) -> dict:
    """YAML/JSON text held in memory as a mapping of fields; InputError naming ``field`` else."""
    from paraplan.io.documents import parse_document

    data = parse_document(text, "the pasted text", field, as_json=text.lstrip().startswith("{"))
    if not isinstance(data, dict):
        raise InputError(f"{field}: the pasted text is not a mapping of fields")
    return data


def pipeline_stages(model, system, plan=None, *, framework=None, **plan_fields: Any) -> dict:
    """One plan's pipeline stage by stage (step.stage_times.pipeline_stages: each stage's F, B, W
    and point-to-point seconds per micro-batch, the schedule, the composition's pipeline time);
    arguments as for :func:`estimate`. :func:`schedule_order` gives the schedule's passes."""
    from paraplan.step.stage_times import pipeline_stages as stages_of

    return stages_of(*_problem(model, system, plan, framework, plan_fields))


def estimate_stages(model, plan, cluster=None, *, system=None) -> Estimate:
    """``paraplan estimate --plan FILE`` in Python: one per-stage plan (a StagePlanSpec or its dict,
    specs/stage_plan.py) on ``cluster`` (a file, a dict or a ClusterSpec), or on ``system``'s uniform
    cluster of the plan's GPUs. The same :class:`~paraplan.step.result.Estimate` as :func:`estimate`,
    with its per-stage fields filled (step.per_stage.estimate_stage_plan)."""
    from paraplan.catalog.clusters import load_cluster
    from paraplan.specs.cluster import uniform_cluster
    from paraplan.specs.stage_plan import StagePlanSpec, stage_plan_from_dict
    from paraplan.step.per_stage import estimate_stage_plan

    if (cluster is None) == (system is None):
        raise InputError("cluster: give either a cluster or a system, not both or neither")
    model_spec = load_model(str(model) if isinstance(model, Path) else model)
    plan_spec = plan if isinstance(plan, StagePlanSpec) else stage_plan_from_dict(plan, "plan")
    cluster_spec = (
        load_cluster(cluster)
        if system is None
        else uniform_cluster(
            load_system(str(system) if isinstance(system, Path) else system), plan_spec.gpus
        )
    )
    return estimate_stage_plan(model_spec, cluster_spec, plan_spec)


def search_cluster(
    model, cluster, global_batch: int, *, top: int = 5, time_budget_s=5.0, framework=None, **fields
):
    """``paraplan search --cluster --json [--framework F]``: the AMP-style search over node pools (a
    file, a dict, or YAML/JSON text with a newline, held in memory); ``fields``: HeteroProblem fields
    (seq_length, dtype, attention, tps, pps, micro_batches, recompute; the run-wide axes cps, schedules,
    vary_offload: search.staged.axes; a mixture-of-experts model's ep, etp, dispatchers, capacity_factor,
    moe_balance, expert_load_cv); ``framework``: a profile, read
    as the command reads it (search.staged.hetero.under_profile). A listed axis the search would
    search nothing of is refused as the command refuses it (search.staged.axes.axes_violations)."""
    from paraplan.catalog import load_framework
    from paraplan.catalog.clusters import load_cluster, pasted_cluster
    from paraplan.search.staged.axes import axes_violations
    from paraplan.search.staged.hetero import HeteroProblem, search_cluster as run, under_profile

    if isinstance(cluster, str) and "\n" in cluster:  # held in memory: no file named in it is read
        cluster = pasted_cluster(_pasted(cluster, "cluster"))
    model_spec = load_model(str(model) if isinstance(model, Path) else model)
    cluster_spec = load_cluster(cluster)
    if framework is not None:
        cluster_spec, fields = under_profile(load_framework(framework), cluster_spec, fields)
    problem = HeteroProblem(model_spec, cluster_spec, global_batch, **fields)
    if refused := axes_violations(problem, seeded=False):
        raise InputError.from_violations(refused)
    return run(problem, top_k=top, time_budget_s=time_budget_s).to_dict()


def sweep(definition: dict | str, progress=None, catalog_only: bool = False) -> dict:
    """``paraplan sweep`` in memory: the sweep.json document of a sweep definition (the ``sweep``
    object of config.json / sweep.json, as a dict or YAML/JSON text; sweep.definition), every
    point searched here, no file written; ``progress(done, total, phase)``; ``catalog_only``:
    refuse a model, system or framework that is not a catalog name (no file is read)."""
    from paraplan.sweep.definition import run_in_memory, sweep_config

    data = _pasted(definition, "sweep") if isinstance(definition, str) else definition
    return run_in_memory(sweep_config(data, catalog_names() if catalog_only else None), progress)


register_jupyter_views()
