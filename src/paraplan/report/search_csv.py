"""CSV files of a search: every feasible plan streamed as it is found (``--csv-all``) and the plans
shown with their figures (``--csv``), each written atomically (:class:`AtomicText`).
"""

from __future__ import annotations

import csv
from pathlib import Path

from paraplan.report.search_view import plan_figures
from paraplan.search.run import SearchResult
from paraplan.search.space import SearchProblem
from paraplan.specs.errors import InputError
from paraplan.specs.plan import PLAN_COLUMNS
from paraplan.units import GiB

CSV_PLAN_FIELDS = (*PLAN_COLUMNS, "global_batch")  # specs.plan: the one list of plan columns
CSV_METRICS = ("step_time_s", "tokens_per_s", "objective", "peak_memory_gib")


class AtomicText:
    """A text file written to a temporary file beside ``path`` and renamed onto it by ``close``
    (``discard`` removes the temporary file): readers never see half a file. The rule (fsync,
    rename, a device such as /dev/null or /dev/full written through, never replaced) is
    ``paraplan.io.documents.AtomicTarget``."""

    def __init__(self, path: Path, flag: str):
        from paraplan.io.documents import AtomicTarget

        self.path = Path(path)
        self.target = AtomicTarget(self.path, flag)
        try:
            self.handle = open(self.target.path, "w", newline="")  # noqa: SIM115 - closed by close/discard
        except OSError as exc:
            self.target.discard()
            raise InputError(f"{flag}: cannot write {str(path)!r}: {exc.strerror}") from None

    def close(self) -> None:
        self.handle.close()
        self.target.commit()

    def discard(self) -> None:
        self.handle.close()
        self.target.discard()


class CsvSink:
    """Streams every feasible plan to a CSV file batch by batch (``--csv-all``; Calculon's
    all-executions output), written atomically."""

    def __init__(self, path: Path, flag: str = "--csv-all"):
        self.path = path
        self.rows = 0
        self.file = AtomicText(path, flag)
        self.writer = csv.writer(self.file.handle)
        self.writer.writerow([*CSV_PLAN_FIELDS, *CSV_METRICS])

    def __call__(self, columns: dict) -> None:
        """Write one batch given as columns (search.run.feasible_columns)."""
        values = [columns[f].tolist() for f in CSV_PLAN_FIELDS]
        values += [[f"{x:.6g}" for x in columns[m].tolist()] for m in CSV_METRICS[:3]]
        values.append([f"{x:.4f}" for x in columns["peak_memory_gib"].tolist()])
        self.writer.writerows(zip(*values))
        self.rows += len(values[0])

    def write_plans(self, items: list[dict], seq_length: int) -> None:
        """Write plans held as {"plan", "step_time_s", "objective", "peak_memory_bytes"} (exhaustive path)."""
        for item in items:
            plan = item["plan"]
            data = plan.model_dump()
            data["schedule"] = plan.pipeline_schedule
            tokens = plan.global_batch * seq_length
            self.writer.writerow(
                [
                    *(data[f] for f in CSV_PLAN_FIELDS),
                    f"{item['step_time_s']:.6g}",
                    f"{tokens / item['step_time_s']:.6g}",
                    f"{item['objective']:.6g}",
                    f"{item['peak_memory_bytes'] / GiB:.4f}",
                ]
            )
            self.rows += 1

    def close(self) -> None:
        self.file.close()

    def discard(self) -> None:
        self.file.discard()


TOP_CSV_METRICS = ("step_time_s", "tokens_per_s", "mfu", "peak_memory_gib", "objective")


BAND_CSV_COLUMNS = (
    "band_low_pct",
    "band_high_pct",
    "extrapolated_features",
)  # validate.band, the rows shown only


def write_top_csv(
    path: Path, result: SearchResult, problem: SearchProblem, tokens: float | None = None
) -> int:
    """The plans shown (``--csv``): rank, plan label, plan fields, metrics, cost (with a price), the
    run (with ``tokens``), the error band and its extrapolated features, and the time breakdown;
    written atomically. Returns the rows written."""
    from dataclasses import asdict

    sink = AtomicText(path, "--csv")
    try:
        writer = csv.writer(sink.handle)
        breakdown = list(asdict(result.plans[0].estimate.breakdown)) if result.plans else []
        cost = problem.price_per_gpu_hour is not None
        extra = ["cost_usd_per_step", "cost_usd_per_million_tokens"] if cost else []
        extra += (
            (["run_days", "run_gpu_hours"] + (["run_cost_usd"] if cost else []))
            if tokens is not None
            else []
        )
        writer.writerow(
            [
                "rank",
                "plan_label",
                "equivalent_plans",
                *CSV_PLAN_FIELDS,
                *TOP_CSV_METRICS,
                *extra,
                *BAND_CSV_COLUMNS,
                *breakdown,
            ]
        )
        for ranked in result.plans:
            e = ranked.estimate
            data = ranked.plan.model_dump()
            data["schedule"] = ranked.plan.pipeline_schedule
            figures = plan_figures(ranked, problem, tokens)
            metrics = [
                e.step_time_s,
                e.tokens_per_s,
                e.mfu,
                e.peak_stage.peak_bytes / GiB,
                ranked.objective,
            ]
            more = (
                [figures["cost_usd_per_step"], figures["cost_usd_per_million_tokens"]]
                if cost
                else []
            )
            if tokens is not None:
                run = figures["run"]
                more += [run["days"], run["gpu_hours"]] + ([run["cost_usd"]] if cost else [])
            parts = asdict(e.breakdown)
            band = figures["error_band"]
            writer.writerow(
                [
                    ranked.rank,
                    figures["plan_label"],
                    " | ".join(figures["equivalent_plan_labels"]),
                    *(data[f] for f in CSV_PLAN_FIELDS),
                    *(f"{x:.6g}" for x in metrics + more),
                    f"{band['low_pct']:.4g}",
                    f"{band['high_pct']:.4g}",
                    " | ".join(band["extrapolated"]),
                    *(f"{parts[k]:.6g}" for k in breakdown),
                ]
            )
    except BaseException:
        sink.discard()
        raise
    sink.close()
    return len(result.plans)
