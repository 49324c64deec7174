"""How the tensor-parallel ranks split a layer: 1D (Megatron), 2D SUMMA, or the 2D sequence/context grid.

The three layouts are the NERSC performance model's parallel strategies (Subramanian et al. 2024,
"Comprehensive Performance Modeling and System Design Insights for Foundation Models",
arXiv:2410.00273; its ``parallel_strat`` '1D', '2D' and '2D-seqp'):

- ``1d``: Megatron-LM tensor parallelism (Shoeybi et al. 2019): every weight matrix split along one
  dimension over the ``tp`` ranks, activations all-reduced (or reduce-scattered/all-gathered with
  sequence parallelism).
- ``2d``: SUMMA (van de Geijn & Watts 1997, "SUMMA: Scalable Universal Matrix Multiplication
  Algorithm", Concurrency: Practice and Experience 9(4)) on a ``tp_rows`` × ``tp/tp_rows`` grid
  (the NERSC model's m2 × m1): the activations of a layer are split by tokens over the grid's rows
  and by hidden width over its columns, each weight matrix by input width over the rows and by
  output width over the columns; a linear layer broadcasts activation panels along the grid's rows
  and weight panels along its columns, ``summa_panels`` panels per product (the model's
  ``summa_nb``), each broadcast overlapping the previous panel's update.
- ``2d-seq``: the NERSC model's 2D sequence/context layout: heads (and weights) split over ``tp``
  as in 1D, the sequence over ``cp``; the keys and values of the whole sequence are all-gathered
  over ``cp`` before attention (and their gradients reduce-scattered), instead of passed around a
  ring (Liu et al. 2023). The grid is tp × cp, so it needs cp > 1.

Rules: specs/rules.py (tp_layout_violations, grid_rules). Cost functions: graph/summa.py (the op graph of a 2D layer), cost/summa.py (grid spans, pipelined
panel exposure), cost/comm.py (broadcast and reduce on the two network tiers).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from paraplan.specs.strict import InputModel

TPLayout = Literal["1d", "2d", "2d-seq"]
TP_LAYOUTS: tuple[str, ...] = ("1d", "2d", "2d-seq")


class TPLayoutFields(InputModel):
    """Tensor-parallel layout knobs of a plan (the defaults leave a 1D plan unchanged)."""

    tp_layout: TPLayout = Field(
        "1d",
        description="1d (Megatron), 2d (SUMMA on a tp_rows × tp/tp_rows grid) or 2d-seq (heads over tp, "
        "sequence over cp with K/V all-gathered); NERSC model, arXiv:2410.00273",
    )
    tp_rows: int | None = Field(
        None,
        gt=0,
        description="2d: rows of the tensor-parallel grid (tokens split over rows, widths over the "
        "tp/tp_rows columns); default: the largest divisor of tp not above √tp",
    )
    summa_panels: int | None = Field(
        None,
        gt=0,
        description="2d: panels per SUMMA product (NERSC summa_nb); default max(rows, columns)",
    )


def default_rows(tp: int) -> int:
    """The squarest grid: the largest divisor of tp not above √tp (rows ≤ columns)."""
    return max(r for r in range(1, math.isqrt(tp) + 1) if tp % r == 0)


def grid_shape(tp: int, tp_rows: int | None) -> tuple[int, int]:
    """(rows r, columns c) of the 2D grid, r·c = tp."""
    rows = tp_rows if tp_rows is not None else default_rows(tp)
    return rows, tp // rows


def panel_count(rows: int, cols: int, summa_panels: int | None) -> int:
    """SUMMA panels per product: the plan's, else max(r, c) — the NERSC model's docstring value for a
    square grid (nb = m), where every rank owns one panel of the shared dimension."""
    return summa_panels if summa_panels is not None else max(rows, cols)
