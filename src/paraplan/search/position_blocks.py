"""A search's candidates whose stages do not tile the nodes, each stage's blocks on its own tp and cp spans (issue 31).

The estimator lays such a plan out stage by stage (step.placement.placed_stage_inputs) and costs each stage's blocks
on that stage's own tp and cp spans (step.placement.position_spans, cost.group_spans.stage_spans: tp 3, pp 3 on
8-GPU nodes, only stage 2's tp group, ranks 6-8, straddles two). The search's units are costed on the plan's
spans (the slowest stage's), so where a row's stages' spans differ (``varying_rows``) search.table.RowTable costs
the blocks of each position on its own spans (``position_keys``), and bounds such a row by its op-time floor
(RowTable.work_floors, which costs no collective: at most any stage's layer work)."""

from __future__ import annotations

import numpy as np

from paraplan.cost.group_spans import stage_spans
from paraplan.specs.parallel import DIM_NAMES


def varying_rows(columns: dict[str, np.ndarray], tiles: np.ndarray, domain: int) -> np.ndarray:
    """Per row: its stages do not tile the nodes (``tiles`` false) and the (tp, cp) spans of its stages
    (cost.group_spans.stage_spans, which repeat every D/gcd(S, D) positions) are not all alike."""
    out = np.zeros(len(tiles), dtype=bool)
    rows = np.flatnonzero(~tiles)
    if not rows.size:
        return out
    keys = np.stack([columns[n][rows] for n in DIM_NAMES], axis=1)
    distinct, which = np.unique(keys, axis=0, return_inverse=True)
    varies = np.array(
        [
            len({stage_spans(tp, cp, dp, s, domain) for s in range(min(pp, domain))}) > 1
            for tp, cp, dp, pp in distinct.tolist()
        ],
        dtype=bool,
    )
    out[rows] = varies[which.reshape(-1)]
    return out


def position_keys(
    columns: dict[str, np.ndarray], rows: np.ndarray, units: np.ndarray, position: int, domain: int
) -> tuple[list[tuple], np.ndarray]:
    """(the distinct (unit, tp span, cp span) of the candidates of rows ``rows`` and units ``units`` at stage
    ``position``, each candidate's index among them)."""
    spans = [
        stage_spans(tp, cp, dp, position, domain)
        for tp, cp, dp in zip(
            columns["tp"][rows].tolist(), columns["cp"][rows].tolist(), columns["dp"][rows].tolist()
        )
    ]
    keys = list(zip(units.tolist(), spans))
    where: dict[tuple, int] = {}
    index = np.array([where.setdefault(k, len(where)) for k in keys], dtype=np.int64)
    return list(where), index
