"""Run a design-space sweep: the plan search at every point of systems × GPU counts × ``--set`` axes.

Points are numbered in cartesian order (systems outermost, then GPU counts, then each ``--set``
axis in the order given). Each point is one independent task — ``run_point(task) -> record`` with
plain-data input and output — so the same function runs in this process, in a
``ProcessPoolExecutor`` or as a Dask task, and gives the same record wherever it ran.

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
digits, so two runs of one sweep give byte-identical files, also on different machines.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from paraplan.catalog import load_model, load_system
from paraplan.io.documents import atomic_write_text
from paraplan.specs.limits import check_search_bounds
from paraplan.search.processes import die_with_parent
from paraplan.specs.errors import InputError
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec
from paraplan.sweep.journal import CONFIG_FILE, POINTS_FILE, PointWriter, dumps, locked, open_output  # noqa: F401
from paraplan.sweep.schema import EMPTY_SUMMARY, PlanSummary, csv_columns
from paraplan.sweep.params import SetAxis, apply_overrides, check_axes, override_values, si_value
from paraplan.units import GiB

JSON_FILE = "sweep.json"
CSV_FILE = "sweep.csv"
FLOAT_DIGITS = (
    9  # significant digits of every float written (last-bit differences between machines vanish)
)
MAX_POINTS = 10_000  # points of one sweep (each is a whole plan search)

RESTRICTION_FIELDS = ("tp", "pp", "cp", "micro_batch", "recompute", "zero", "schedules")


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

    def check(self) -> None:
        if not self.systems:
            raise InputError("--system: give at least one system")
        if len(set(self.systems)) != len(self.systems):
            raise InputError(
                f"--system: {','.join(self.systems)!r} repeats a system; list each once"
            )
        if (self.global_batch is None) == (self.max_global_batch is None):
            raise InputError(
                "--global-batch: give exactly one of --global-batch or --max-global-batch"
            )
        batch = self.global_batch if self.global_batch is not None else self.max_global_batch
        if batch <= 0:
            raise InputError(f"--global-batch: {batch} is not allowed; must be a positive integer")
        if self.seq_length <= 0:
            raise InputError(
                f"--seq-length: {self.seq_length} is not allowed; must be a positive integer"
            )
        check_search_bounds(
            gpus=max(self.gpus),
            seq_length=self.seq_length,
            batch=batch,
            top=self.top,
            batch_flag="--global-batch" if self.global_batch is not None else "--max-global-batch",
        )
        if self.tokens is not None and not (math.isfinite(self.tokens) and self.tokens > 0):
            raise InputError(
                f"--tokens: {self.tokens!r} is not allowed; must be a finite positive number"
            )
        count = len(self.systems) * len(self.gpus) * math.prod(len(a.values) for a in self.sets)
        if count > MAX_POINTS:
            raise InputError(
                f"--set: {count:,} points are too many for one sweep; at most {MAX_POINTS:,}"
            )
        unknown = set(self.restrictions) - set(RESTRICTION_FIELDS)
        if unknown:
            raise InputError(
                f"restrictions: unknown axis {sorted(unknown)[0]!r}; allowed: {', '.join(RESTRICTION_FIELDS)}"
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


# ---- one point ------------------------------------------------------------------------------
def point_key(task: dict) -> str:
    """Hash of the whole point (model and system specs, settings, swept values): the journal's key."""
    identity = {k: task[k] for k in ("model", "system", "settings", "swept", "set_si")}
    return hashlib.sha256(_dumps(identity).encode()).hexdigest()[:32]


def _rounded(value):
    """Floats to FLOAT_DIGITS significant digits (recursively); non-finite floats raise ValueError."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(value)
        return float(f"{value:.{FLOAT_DIGITS}g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def _first_non_finite(value, path: str = "") -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return path or "value"
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, (list, tuple))
        else ()
    )
    for k, v in items:
        found = _first_non_finite(v, f"{path}.{k}" if path else str(k))
        if found:
            return found
    return None


def run_point(task: dict) -> dict:
    """Search one point; return its record (plain JSON data, floats rounded, no wall-clock value).

    A point whose result holds a non-finite number is recorded as not feasible with the reason,
    never written as ``Infinity``/``NaN``."""
    record = _run_point(task)
    bad = _first_non_finite(record)
    if bad is not None:
        keep = {k: record[k] for k in ("index", "model", *task["swept"], "set_si")}
        record = {
            **keep,
            **EMPTY_SUMMARY,
            "feasible": False,
            "top": [],
            "nearest_miss": None,
            "search": None,
            "reason": f"the model gave a non-finite value ({bad}); the inputs are outside its range",
        }
        if task["settings"]["tokens"]:
            record["time_to_train_days"] = None
    record["key"] = point_key(task)
    return _rounded(record)


def _run_point(task: dict) -> dict:
    from paraplan.step.estimate import estimate
    from paraplan.search.run import search
    from paraplan.search.space import SearchProblem
    from paraplan.specs.plan import PlanSpec

    model = ModelSpec.model_validate(task["model"])
    system = SystemSpec.model_validate(task["system"])
    record = {
        "index": task["index"],
        "model": model.name,
        **task["swept"],
        "set_si": task["set_si"],
    }
    settings = task["settings"]
    problem = SearchProblem(
        model=model,
        system=system,
        gpus=task["swept"]["gpus"],
        seq_length=settings["seq_length"],
        global_batch=settings["global_batch"],
        max_global_batch=settings["max_global_batch"],
        dtype=settings["dtype"],
        attention=settings["attention"],
        objective=settings["objective"],
        vary_offload=not settings["no_offload"],
        vary_overlap=not settings["default_overlap"],
        vary_placement=not settings["default_placement"],
        vary_split=settings["vary_split"],
        price_per_gpu_hour=system.price_per_gpu_hour,
        **{k: tuple(v) for k, v in settings["restrictions"].items()},
        **(
            {
                "framework": settings["framework"],
                "default_overlaps": tuple(settings["default_overlaps"]),
            }
            if "framework" in settings
            else {}
        ),
    )
    record.update(
        EMPTY_SUMMARY, feasible=False, top=[], nearest_miss=None, reason=None, search=None
    )
    try:
        result = search(
            problem, top_k=settings["top"], workers=1
        )  # a sweep runs its points in parallel instead
    except (
        InputError
    ) as exc:  # this point cannot be searched (no split of the GPUs, batch too small, ...)
        record["reason"] = str(exc)
        return record
    record["search"] = {
        "candidates": result.candidates,
        "evaluated": result.evaluated,
        "feasible": result.feasible,
    }
    if result.plans:
        best = result.plans[0]
        record.update(PlanSummary.of(best.estimate, best.plan).to_dict(), feasible=True)
        record["top"] = [
            {
                "rank": p.rank,
                "plan_label": PlanSummary.of(p.estimate, p.plan).plan_label,
                "plan": p.plan.model_dump(),
                "step_time_s": p.estimate.step_time_s,
                "tokens_per_s": p.estimate.tokens_per_s,
                "mfu": p.estimate.mfu,
                "peak_memory_gib": p.estimate.peak_stage.peak_bytes / GiB,
            }
            for p in result.plans
        ]
        if settings["tokens"]:
            record["time_to_train_days"] = best.estimate.run_totals(settings["tokens"], None)[
                "days"
            ]
    elif result.nearest_miss is not None:
        miss = result.nearest_miss
        plan = PlanSpec.model_validate(miss["plan"])
        near = PlanSummary.of(estimate(model, system, plan), plan).to_dict()
        near["overflow_gib"] = miss["overflow_gib"]
        record["nearest_miss"] = near
        record["reason"] = (
            f"no plan fits in memory; nearest miss needs {miss['peak_memory_gib']:.1f} GiB "
            f"of {miss['capacity_gib']:.1f} GiB per GPU"
        )
    else:
        record["reason"] = "no candidate plan"
    if settings["tokens"] and "time_to_train_days" not in record:
        record["time_to_train_days"] = None
    return record


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
    from paraplan.step.estimate import model_violations

    if broken := model_violations(
        model
    ):  # no point of the sweep could search it (the uniform search's model rule)
        raise InputError.from_violations(broken)
    systems = [load_system(s, field="system") for s in config.systems]
    profile = None
    if (
        config.framework is not None
    ):  # every system as the framework uses it (frameworks.framework_system)
        from paraplan.catalog import load_framework
        from paraplan.cost.frameworks import framework_system

        profile = load_framework(config.framework, field="--framework")
        systems = [framework_system(profile, s) for s in systems]
    names = [s.name for s in systems]
    if len(set(names)) != len(names):
        raise InputError(
            f"--system: {', '.join(config.systems)} give systems of the same name; rename one"
        )
    check_axes(model, systems, list(config.sets))
    settings = {
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
        "restrictions": {
            k: list(v) for k, v in sorted(config.restrictions.items()) if v is not None
        },
    }
    if (
        profile is not None
    ):  # the name for the error band, the overlap defaults for --default-overlap
        from paraplan.cost.frameworks import framework_search_fields

        fields = framework_search_fields(profile)
        settings.update(
            framework=fields["framework"], default_overlaps=list(fields["default_overlaps"])
        )
    pts = points(config)
    variants: dict[tuple, tuple[dict, dict, dict]] = {}
    tasks = []
    for p in pts:
        key = (p.system, p.combo)
        if key not in variants:
            m, s = apply_overrides(
                model, systems[p.system], override_values(list(config.sets), p.combo)
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


def _check_dtype(system: SystemSpec, dtype: str) -> None:
    try:
        system.accelerator.peak_matrix_flops(dtype)
    except KeyError:
        have = ", ".join(sorted(system.accelerator.matrix_flops))
        raise InputError(
            f"--dtype: {dtype} is not supported by {system.name} "
            f"(accelerator.matrix_flops has {have}); choose one of those"
        ) from None


_dumps = dumps


def execute(
    tasks: list[dict], write: Callable[[dict], None], workers: int = 1, dask: str | None = None
) -> None:
    """Run ``run_point`` on every task: in this process (workers=1), on local processes, or on Dask."""
    if not tasks:
        return
    if dask is not None:
        _execute_dask(tasks, write, dask, workers)
    elif workers <= 1 or len(tasks) == 1:
        for task in tasks:
            write(run_point(task))
    else:
        import multiprocessing
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

        context = multiprocessing.get_context(
            "spawn"
        )  # no fork of a process that runs a progress thread
        pool = ProcessPoolExecutor(
            max_workers=min(workers, len(tasks)),
            mp_context=context,
            initializer=die_with_parent,
            initargs=(os.getpid(),),
        )
        try:
            pending = {pool.submit(run_point, task) for task in tasks}
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in sorted(finished, key=lambda f: f.result()["index"]):
                    write(future.result())
        except (
            BaseException
        ):  # interrupted or failed: stop at once; finished points are saved already
            processes = list(
                (getattr(pool, "_processes", None) or {}).values()
            )  # shutdown() forgets them
            for process in processes:
                process.terminate()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()


def _execute_dask(
    tasks: list[dict], write: Callable[[dict], None], address: str, workers: int
) -> None:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:  # pragma: no cover - a main dependency
        raise InputError(
            "--dask: the 'distributed' package is not installed; pip install distributed"
        ) from None
    cluster = None
    try:
        if address == "local":
            cluster = LocalCluster(
                n_workers=workers if workers > 1 else 2,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
            )
            client = Client(cluster)
            # the workers are this process's children (the nannies run in this process): give them the
            # same parent-death guarantee as --workers (Dask's own worker processes also watch a pipe
            # to the parent and exit when it closes; this does not depend on that)
            client.run(die_with_parent, os.getpid())
        else:
            _check_dask_address(address)
            try:
                client = Client(address, timeout="10s")
            except (OSError, TimeoutError, ValueError) as exc:
                raise InputError(
                    f"--dask: cannot connect to the scheduler at {address!r}: {exc}"
                ) from None
        try:
            futures = [
                client.submit(
                    run_point,
                    task,
                    key=f"paraplan-point-{task['index']}-{_task_token(task)}",
                    pure=False,
                )
                for task in tasks
            ]
            for future, record in as_completed(futures, with_results=True):
                write(record)
        finally:
            client.close()
    finally:
        if cluster is not None:
            cluster.close()


def _check_dask_address(address: str) -> None:
    """A scheduler address ``[protocol://]host:port`` with a port in 1..65535 (checked before a
    connection attempt that would wait for its timeout)."""
    rest = address.split("://", 1)[-1]
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise InputError(
            f"--dask: {address!r} is not a scheduler address; give tcp://HOST:PORT (port 1-65535) or 'local'"
        )


def _task_token(task: dict) -> str:
    import hashlib

    return hashlib.sha1(_dumps(task).encode()).hexdigest()[:12]


# ---- results --------------------------------------------------------------------------------
def results_document(config: SweepConfig, records: list[dict]) -> dict:
    """The sweep.json document: the sweep definition and one record per point in cartesian order."""
    return {"sweep": config.to_dict(), "points": sorted(records, key=lambda r: r["index"])}


def write_results(document: dict, out_dir: Path) -> list[Path]:
    """sweep.json and sweep.csv, each written atomically (temporary file, fsync, rename)."""
    json_path, csv_path = out_dir / JSON_FILE, out_dir / CSV_FILE
    atomic_write_text(
        json_path,
        json.dumps(_rounded(document), sort_keys=True, indent=2, allow_nan=False) + "\n",
        field="--out",
    )
    write_csv(document, csv_path)
    return [json_path, csv_path]


def write_csv(document: dict, path: Path) -> None:
    """One row per point: swept values, feasibility, metrics, the best plan's knobs, memory, breakdown."""
    sweep = document["sweep"]
    set_paths = [s["path"] for s in sweep["sets"]]
    with_days = sweep.get("tokens") is not None
    columns = csv_columns(set_paths, with_days)
    fh = io.StringIO()
    writer = csv.writer(fh, lineterminator="\n")
    writer.writerow([name for name, _ in columns])
    for r in document["points"]:
        writer.writerow(["" if (v := value(r)) is None else v for _, value in columns])
    atomic_write_text(path, fh.getvalue(), field="--out")


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


def load_results(path: Path) -> dict:
    """A saved sweep.json (for ``paraplan plot``); InputError when it is not one."""
    from paraplan.io.documents import parse_document, read_text

    data = parse_document(
        read_text(path, "sweep.json"), repr(str(path)), "sweep.json", as_json=True
    )
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("points"), list)
        or not isinstance(data.get("sweep"), dict)
    ):
        raise InputError(
            f"sweep.json: {str(path)!r} is not a paraplan sweep result (needs 'sweep' and 'points')"
        )
    for point in data["points"]:
        bad = _negative_time(point)
        if bad is not None:
            raise InputError(
                f"sweep.json: {str(path)!r}: {bad} is not allowed; times and memory must be >= 0"
            )
    return data


def _negative_time(value, path: str = "point") -> str | None:
    """The first negative time (``*_s``) or memory (``*_gib``) value in a record, as 'path = value'."""
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, item in items:
        where = f"{path}.{key}"
        if (
            isinstance(item, (int, float))
            and not isinstance(item, bool)
            and str(key).endswith(("_s", "_gib"))
            and item < 0
        ):
            return f"{where} = {item}"
        found = _negative_time(item, where) if isinstance(item, (dict, list)) else None
        if found:
            return found
    return None
