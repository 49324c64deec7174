"""Results as flat records, pandas DataFrames (optional dependency) and HTML for Jupyter.

One record per plan: the plan's label and fields, step time, throughput, utilisation, peak memory,
whether it fits, and the time breakdown (``<part>_s``), all with units in their names. pandas is
imported only by :func:`to_dataframe` (``pip install 'paraplan[pandas]'``).
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import asdict

from paraplan.step.result import Estimate

SUMMARY_COLUMNS = (
    "rank",
    "plan_label",
    "global_batch",
    "step_time_s",
    "tokens_per_s",
    "mfu",
    "peak_memory_gib",
    "fits",
)


def estimate_record(est: Estimate, **extra) -> dict:
    """One flat record of an estimate (Estimate.to_record), ``extra`` fields first (e.g. rank and
    objective)."""
    return {**extra, **est.to_record()}


def search_records(ranked: Iterable, problem=None) -> list[dict]:
    """Records of ranked plans (search.run.RankedPlan): rank and objective, then the estimate's; with the
    search ``problem``, each plan's error band too (``band_low_s``, ``band_high_s``, ``band_coverage_pct``:
    report.search_view.plan_band, the band of the search table and of ``search --json``)."""
    records = []
    for r in ranked:
        record = estimate_record(r.estimate, rank=r.rank, objective=r.objective)
        if problem is not None:
            from paraplan.report.search_view import plan_band

            band = plan_band(r, problem)
            record.update(
                band_low_s=band.low_s,
                band_high_s=band.high_s,
                band_coverage_pct=band.coverage_pct,
            )
        records.append(record)
    return records


def to_dataframe(records: Sequence[dict]):
    """A pandas DataFrame of records (pandas is optional: ``pip install 'paraplan[pandas]'``)."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError(
            "to_dataframe needs pandas, an optional dependency: pip install 'paraplan[pandas]'"
        ) from None
    return pd.DataFrame.from_records(list(records))


_FORMATS = {
    "step_time_s": "{:.4g}",
    "tokens_per_s": "{:,.0f}",
    "mfu": "{:.1%}",
    "peak_memory_gib": "{:.1f}",
    "fits": "{}",
}


def html_table(
    records: Sequence[dict], columns: Sequence[str] = SUMMARY_COLUMNS, caption: str = ""
) -> str:
    """A small HTML table of the ``columns`` of records (Jupyter's ``_repr_html_``), escaped."""
    shown = [c for c in columns if any(c in r for r in records)]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in shown)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(_FORMATS.get(c, '{}').format(r[c]) if c in r else '')}</td>"
            for c in shown
        )
        + "</tr>"
        for r in records
    )
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def estimate_html(est: Estimate) -> str:
    """Jupyter view of an estimate: the summary record and the time breakdown."""
    breakdown = asdict(est.breakdown)
    rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{v:.4g}</td></tr>" for k, v in breakdown.items()
    )
    return (
        html_table(
            [estimate_record(est)],
            [c for c in SUMMARY_COLUMNS if c != "rank"],
            caption=f"{est.model} on {est.gpus} x {est.system}",
        )
        + f"<table><caption>time per step (s)</caption><tbody>{rows}</tbody></table>"
    )
