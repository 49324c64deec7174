"""Run a design-space sweep: the plan search at every point of systems × GPU counts × ``--set`` axes.

Points are numbered in cartesian order (systems outermost, then GPU counts, then each ``--set``
axis in the order given). Each point is one independent task — ``sweep.point.run_point(task) ->
record`` with plain-data input and output — so the same function runs in this process, in a
``ProcessPoolExecutor`` or as a Dask task (``sweep.executors``), and gives the same record wherever
it ran.

Output directory (locked while a sweep writes into it; a second sweep on it is refused):
- ``config.json``   the sweep's definition (and the full model and system specs), for ``--resume``;
- ``points.jsonl``  the journal: one JSON line per finished point, appended and fsync'ed as points
  complete (any order), never rewritten; each record carries ``key``, a hash of the whole point
  (model, system, settings and swept values), by which ``--resume`` matches it — torn, malformed or
  foreign lines are skipped and their points searched again;
- ``sweep.json`` / ``sweep.csv``  regenerated from the journal in cartesian order at the end.
Every file except the journal is written atomically (temporary file, fsync, rename: see
``paraplan.io.documents``). A non-empty directory is refused unless ``resume`` or ``force`` is given.
No wall-clock value is written anywhere and floats are rounded to ``FLOAT_DIGITS`` significant
digits, so two runs of one sweep give byte-identical files, also on different machines
(``sweep.results`` writes them).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from paraplan.catalog import load_model, load_system
from paraplan.search.space import OBJECTIVES
from paraplan.specs.errors import InputError
from paraplan.specs.limits import check_search_bounds
from paraplan.specs.model import ModelSpec
from paraplan.specs.rules_precision import dtype_rule
from paraplan.specs.system import SystemSpec
from paraplan.sweep.executors import execute
from paraplan.sweep.journal import POINTS_FILE, PointWriter, locked, open_output
from paraplan.sweep.params import SetAxis, apply_overrides, check_axes, override_values, si_value
from paraplan.sweep.point import point_key
from paraplan.sweep.results import write_results

MAX_POINTS = 10_000  # points of one sweep (each is a whole plan search)

RESTRICTION_FIELDS = ("tp", "pp", "cp", "micro_batch", "recompute", "zero", "schedules")
OPTIONS = {
    "systems": "--system",
    "sets": "--set",
}  # SweepConfig fields whose option is not --<field>


def option_name(field_name: str) -> str:
    """The ``paraplan sweep`` option that sets a SweepConfig field (how its errors name the field)."""
    return OPTIONS.get(field_name, "--" + field_name.replace("_", "-"))


@dataclass(frozen=True)
class SweepConfig:
    """What to sweep and the search settings shared by every point."""

    model: str
    systems: tuple[str, ...]
    gpus: tuple[int, ...]
    seq_length: int
    sets: tuple[SetAxis, ...] = ()
    global_batch: int | None = None
    max_global_batch: int | None = None
    top: int = 5
    dtype: str = "bf16"
    attention: str = "flash"
    objective: str = "time"
    no_offload: bool = False
    default_overlap: bool = False
    default_placement: bool = False
    vary_split: bool = False  # search.space.SearchProblem.vary_split
    restrictions: dict = field(
        default_factory=dict
    )  # SearchProblem axis name -> tuple of allowed values
    tokens: float | None = None  # run length for time-to-train
    framework: str | None = None  # --framework: a profile name or file (paraplan.cost.frameworks)
    goodput: dict | None = None  # --goodput: the goodput inputs (goodput.inputs, without sources)

    def check(self, name: Callable[[str], str] | None = None) -> None:
        """Every rule of a sweep's settings, in one place for ``paraplan sweep`` and a definition document
        (sweep.definition): InputError on one line naming the field as ``name(field)`` gives it (the
        command-line option by default: option_name)."""
        name = name or option_name
        if not self.systems:
            raise InputError(f"{name('systems')}: give at least one system")
        if len(set(self.systems)) != len(self.systems):
            raise InputError(
                f"{name('systems')}: {','.join(self.systems)!r} repeats a system; list each once"
            )
        if self.objective not in OBJECTIVES:
            raise InputError(
                f"{name('objective')}: {self.objective!r} is not allowed; allowed: {', '.join(OBJECTIVES)}"
            )
        unknown = set(self.restrictions) - set(RESTRICTION_FIELDS)
        if unknown:
            raise InputError(
                f"{name('restrictions')}: unknown axis {sorted(unknown)[0]!r}; allowed: "
                f"{', '.join(RESTRICTION_FIELDS)}"
            )
        batch_field = "global_batch" if self.global_batch is not None else "max_global_batch"
        if (self.global_batch is None) == (self.max_global_batch is None):
            raise InputError(
                f"{name('global_batch')}: give exactly one of {name('global_batch')} or "
                f"{name('max_global_batch')}"
            )
        batch = self.global_batch if self.global_batch is not None else self.max_global_batch
        sizes = ("gpus", "seq_length", batch_field, "top")
        check_search_bounds(
            max(self.gpus), self.seq_length, batch, self.top, tuple(map(name, sizes))
        )
        if self.goodput is not None and self.tokens is None:
            raise InputError(
                f"{name('goodput')}: needs {name('tokens')} (the run length, e.g. 15T)"
            )
        if self.tokens is not None and not (math.isfinite(self.tokens) and self.tokens > 0):
            raise InputError(
                f"{name('tokens')}: {self.tokens!r} is not allowed; must be a finite positive number"
            )
        count = len(self.systems) * len(self.gpus) * math.prod(len(a.values) for a in self.sets)
        if count > MAX_POINTS:
            raise InputError(
                f"{name('sets')}: {count:,} points are too many for one sweep; at most {MAX_POINTS:,}"
            )

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "systems": list(self.systems),
            "gpus": list(self.gpus),
            "sets": [a.to_dict() for a in self.sets],
            "seq_length": self.seq_length,
            "global_batch": self.global_batch,
            "max_global_batch": self.max_global_batch,
            "top": self.top,
            "dtype": self.dtype,
            "attention": self.attention,
            "objective": self.objective,
            "no_offload": self.no_offload,
            "default_overlap": self.default_overlap,
            "default_placement": self.default_placement,
            "restrictions": {
                k: list(v) for k, v in sorted(self.restrictions.items()) if v is not None
            },
            "tokens": self.tokens,
            **({"framework": self.framework} if self.framework is not None else {}),
            **({"goodput": self.goodput} if self.goodput is not None else {}),
            **(
                {"vary_split": True} if self.vary_split else {}
            ),  # absent when off: earlier sweeps' configs still match
        }

    @property
    def axes(self) -> list[tuple[str, list]]:
        """(name, values) of every swept dimension in cartesian order: system, gpus, each --set path."""
        return [("system", list(self.systems)), ("gpus", list(self.gpus))] + [
            (a.path, list(a.values)) for a in self.sets
        ]


@dataclass(frozen=True)
class Point:
    index: int
    system: int  # index into config.systems
    gpus: int
    combo: tuple[str, ...]  # one value per --set axis, as typed


def points(config: SweepConfig) -> list[Point]:
    """Every point in cartesian order."""
    out = []
    combos = list(itertools.product(*(a.values for a in config.sets)))
    for s in range(len(config.systems)):
        for g in config.gpus:
            for combo in combos:
                out.append(Point(len(out), s, g, tuple(combo)))
    return out


def swept_values(config: SweepConfig, point: Point, system_name: str) -> dict:
    values = {"system": system_name, "gpus": point.gpus}
    values.update({a.path: v for a, v in zip(config.sets, point.combo)})
    return values


# ---- the whole sweep ------------------------------------------------------------------------
@dataclass
class Prepared:
    config: SweepConfig
    model: ModelSpec
    systems: list[SystemSpec]
    points: list[Point]
    tasks: list[dict]
    specs: dict  # full model and system dumps, compared on --resume


def prepare(config: SweepConfig) -> Prepared:
    """Load the specs, check every --set value (alone and in combination) and build one task per point."""
    config.check()
    model = load_model(config.model, field="model")
    from paraplan.specs.rules import uniform_model_violations

    if broken := uniform_model_violations(
        model
    ):  # no point of the sweep could search it (the uniform search's model rule)
        raise InputError.from_violations(broken)
    from paraplan.cost.frameworks import run_specs

    given = [load_system(s, field="system") for s in config.systems]
    profile = None
    if config.framework is not None:
        from paraplan.catalog import load_framework

        profile = load_framework(config.framework, field="--framework")
    # every system as the framework uses it, then each point's --set values: cost.frameworks.run_specs,
    # the one order of estimate and search
    systems = [run_specs(model, s, profile)[1] for s in given]
    names = [s.name for s in systems]
    if len(set(names)) != len(names):
        raise InputError(
            f"--system: {', '.join(config.systems)} give systems of the same name; rename one"
        )
    check_axes(model, systems, list(config.sets))
    settings = _settings(config)
    if (
        profile is not None
    ):  # the name for the error band, the overlap defaults for --default-overlap, the run-wide knobs
        from paraplan.cost.frameworks import framework_search_fields

        fields = framework_search_fields(profile)
        settings.update(
            framework=fields["framework"],
            default_overlaps=list(fields["default_overlaps"]),
            runtime=fields["runtime"].model_dump(),
        )
    pts = points(config)
    variants: dict[tuple, tuple[dict, dict, dict]] = {}
    tasks = []
    for p in pts:
        key = (p.system, p.combo)
        if key not in variants:
            values = override_values(list(config.sets), p.combo)
            m, s = run_specs(
                model, given[p.system], profile, lambda m, s, v=values: apply_overrides(m, s, v)
            )
            variants[key] = (
                m.model_dump(),
                s.model_dump(),
                {a.path: si_value(m, s, a.path) for a in config.sets},
            )
            _check_dtype(s, config.dtype)
        model_data, system_data, set_si = variants[key]
        tasks.append(
            {
                "index": p.index,
                "model": model_data,
                "system": system_data,
                "settings": settings,
                "swept": swept_values(config, p, systems[p.system].name),
                "set_si": set_si,
            }
        )
    specs = {"model": model.model_dump(), "systems": [s.model_dump() for s in systems]}
    return Prepared(config, model, systems, pts, tasks, specs)


def _settings(config: SweepConfig) -> dict:
    """The search settings every point of the sweep shares (plain data, part of each point's key)."""
    return {
        "seq_length": config.seq_length,
        "global_batch": config.global_batch,
        "max_global_batch": config.max_global_batch,
        "dtype": config.dtype,
        "attention": config.attention,
        "objective": config.objective,
        "no_offload": config.no_offload,
        "default_overlap": config.default_overlap,
        "default_placement": config.default_placement,
        "vary_split": config.vary_split,
        "top": config.top,
        "tokens": config.tokens,
        **({"goodput": config.goodput} if config.goodput is not None else {}),
        "restrictions": {
            k: list(v) for k, v in sorted(config.restrictions.items()) if v is not None
        },
    }


def _check_dtype(system: SystemSpec, dtype: str) -> None:
    if rule := dtype_rule(dtype, system.accelerator):
        raise InputError(f"--dtype: {dtype!r} is not allowed; {rule}")


def results_document(config: SweepConfig, records: list[dict]) -> dict:
    """The sweep.json document: the sweep definition and one record per point in cartesian order."""
    return {"sweep": config.to_dict(), "points": sorted(records, key=lambda r: r["index"])}


@dataclass
class SweepOutcome:
    document: dict
    files: list[Path]
    ran: int  # points computed by this run
    skipped: int  # points already finished (--resume)
    warnings: tuple[str, ...] = ()  # one line each, for stderr


def run_sweep(
    config: SweepConfig,
    out_dir: Path,
    workers: int = 1,
    resume: bool = False,
    dask: str | None = None,
    on_point: Callable[[dict], None] | None = None,
    on_start: Callable[[int, int], None] | None = None,
    plots: bool = True,
    force: bool = False,
) -> SweepOutcome:
    """Run (or finish, with ``resume``) a sweep and write its results and plots into ``out_dir``.

    ``out_dir`` is locked for the run; a non-empty one is refused unless ``resume`` or ``force``
    (see ``paraplan.sweep.journal``).

    ``workers > 1`` and ``dask="local"`` start worker processes with the *spawn* method, which
    re-imports the calling script: call this from a script under ``if __name__ == "__main__":``."""
    if workers < 1:
        raise InputError(f"--workers: {workers} is not allowed; must be >= 1")
    if resume and force:
        raise InputError(
            "--force: give either --resume (continue) or --force (start again), not both"
        )
    prepared = prepare(config)
    keys = [point_key(t) for t in prepared.tasks]
    with locked(out_dir):
        done = open_output(out_dir, _config_record(prepared), prepared.tasks, keys, resume, force)
        pending = [t for t in prepared.tasks if t["index"] not in done]
        if on_start is not None:
            on_start(len(prepared.tasks), len(done))
        writer = PointWriter(out_dir / POINTS_FILE, on_point)
        execute(pending, writer, workers=workers, dask=dask)
        records = {**done, **writer.records}
        missing = [t["index"] for t in prepared.tasks if t["index"] not in records]
        if missing:  # pragma: no cover - every executor returns every task or raises
            raise RuntimeError(f"sweep: {len(missing)} points did not finish")
        document = results_document(config, list(records.values()))
        files = write_results(document, out_dir)
        if plots:
            from paraplan.report.plots import plot_sweep

            files += plot_sweep(document, out_dir)
    from paraplan.specs.limits import position_warning

    warning = position_warning(prepared.model, config.seq_length)
    return SweepOutcome(
        document, files, ran=len(pending), skipped=len(done), warnings=(warning,) if warning else ()
    )


def _config_record(prepared: Prepared) -> dict:
    return {"sweep": prepared.config.to_dict(), "specs": prepared.specs}
