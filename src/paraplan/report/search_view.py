"""Text, CSV and JSON views of a search result."""

from __future__ import annotations

import csv
from pathlib import Path

from paraplan.report.render import simple_table
from paraplan.specs.parallel import DEFAULT_PLACEMENT_LABEL
from paraplan.search.explain import Alternative
from paraplan.search.run import SearchResult
from paraplan.specs.errors import InputError
from paraplan.specs.plan import PlanSpec
from paraplan.units import GiB


def plan_label(plan: PlanSpec) -> str:
    """Compact plan text: degrees, micro-batch, schedule, recompute, SP, ZeRO, offloads, overlaps, placement."""
    parts = [f"tp{plan.tp} pp{plan.pp} cp{plan.cp} dp{plan.dp}", f"mb{plan.micro_batch}"]
    sched = plan.pipeline_schedule
    if plan.pp > 1:
        parts.append(sched + (f"/v{plan.vpp}" if plan.vpp > 1 else ""))
    parts.append(f"rc:{plan.recompute}")
    if plan.sequence_parallel:
        parts.append("sp")
    parts.append(f"zero{plan.zero}")
    offloads = [n for n, on in (("w", plan.offload_weights), ("act", plan.offload_activations),
                                ("opt", plan.offload_optimizer)) if on]
    if offloads:
        parts.append("offload:" + "+".join(offloads))
    if plan.overlap_tp_comm:
        parts.append("tp-overlap")
    if not plan.overlap_dp_grad_reduce and plan.dp * plan.cp > 1:
        parts.append("no-dp-overlap")
    if not plan.overlap_param_gather and plan.zero >= 1 and plan.dp * plan.cp > 1:
        parts.append("no-gather-overlap")
    if plan.placement != DEFAULT_PLACEMENT_LABEL:
        parts.append(plan.placement)
    return " ".join(parts)


def plans_table(result: SearchResult):
    """Top plans with step time, tokens/s, MFU, peak memory and the main time components."""
    table = simple_table(
        "Fastest plans that fit", "#", "plan", "global batch", "step s", "tokens/s", "MFU", "peak GiB",
        "compute s", "bubble s", "comm s", numeric_from=2, foldable=(1,),
    )
    for ranked in result.plans:
        e, b = ranked.estimate, ranked.estimate.breakdown
        comm = b.tp_comm_s + b.cp_comm_s + b.pp_comm_s + b.ep_comm_s + b.dp_comm_s
        table.add_row(
            str(ranked.rank), plan_label(ranked.plan), str(ranked.plan.global_batch), f"{e.step_time_s:.3f}",
            f"{e.tokens_per_s:,.0f}", f"{e.mfu:.1%}", f"{e.peak_stage.peak_bytes / GiB:.1f}",
            f"{b.forward_s + b.backward_s + b.recompute_s:.3f}", f"{b.bubble_s:.3f}", f"{comm:.3f}",
        )
    return table


def summary_line(result: SearchResult) -> str:
    pruned = result.candidates - result.evaluated
    rest = f"; {pruned:,} ruled out by an admissible time bound" if pruned else ""
    return (
        f"{result.candidates:,} candidate plans ({result.rows:,} per-layer configurations); "
        f"{result.evaluated:,} evaluated, {result.feasible:,} of those fit{rest}; {result.seconds:.2f} s"
    )


def nearest_miss_line(result: SearchResult) -> str:
    miss = result.nearest_miss
    if miss is None:
        return "no plan in the searched space fits, and none was evaluated"
    plan = PlanSpec.model_validate(miss["plan"])
    return (
        f"no plan fits in memory. Nearest miss: {plan_label(plan)} needs {miss['peak_memory_gib']:.1f} GiB "
        f"per GPU > {miss['capacity_gib']:.0f} GiB (over by {miss['overflow_gib']:.1f} GiB)"
    )


def explain_table(alternatives: list[Alternative], best_time_s: float):
    """One row per one-knob neighbour of the best plan: what changed and what decided."""
    table = simple_table("Why the best plan wins (one knob changed at a time)", "knob", "change", "verdict",
                         "Δ step", "reason", numeric_from=3, foldable=(1, 4))
    for alt in alternatives:
        delta = "" if alt.delta_s is None else f"{alt.delta_s / best_time_s:+.1%}"
        table.add_row(alt.knob, alt.change, alt.verdict, delta, alt.reason)
    return table


CSV_PLAN_FIELDS = (
    "tp", "pp", "cp", "dp", "vpp", "schedule", "micro_batch", "global_batch", "recompute", "sequence_parallel",
    "zero", "offload_weights", "offload_activations", "offload_optimizer", "overlap_tp_comm",
    "overlap_dp_grad_reduce", "overlap_param_gather", "placement",
)


CSV_METRICS = ("step_time_s", "tokens_per_s", "objective", "peak_memory_gib")


class CsvSink:
    """Streams feasible plans to a CSV file batch by batch (Calculon's all-executions output)."""

    def __init__(self, path: Path):
        self.path = path
        self.rows = 0
        try:
            self.handle = path.open("w", newline="")
        except OSError as exc:
            raise InputError(f"--csv: cannot write {str(path)!r}: {exc.strerror}") from None
        self.writer = csv.writer(self.handle)
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
            self.writer.writerow([
                *(data[f] for f in CSV_PLAN_FIELDS), f"{item['step_time_s']:.6g}",
                f"{tokens / item['step_time_s']:.6g}", f"{item['objective']:.6g}",
                f"{item['peak_memory_bytes'] / GiB:.4f}",
            ])
            self.rows += 1

    def close(self) -> None:
        self.handle.close()
