"""Published expert-load distributions of learned MoE routers (issue 33), as data: catalog/routing/expert_loads.yaml
(every figure with its model, balancing method and coefficient, gate, granularity, statistic and source).
graph.routing turns a figure into the spread of the experts' routing probabilities and prices the busiest
expert-parallel rank from it; this module only reads the file and picks the default figure of a router."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from paraplan.io.parsed_cache import packaged_yaml

_DATA = Path(__file__).with_name("routing") / "expert_loads.yaml"


@dataclass(frozen=True)
class ExpertLoadFigure:
    """One published load statistic of a learned router (fields as in the data file's header)."""

    id: str
    model: str
    experts: int
    top_k: int
    balancing: str
    coefficient: float | None
    gate: str
    granularity: str  # "expert" | "rank"
    statistic: str  # "max_violation" | "cv"
    value: float
    assignments: float | None  # per expert (or per rank, granularity rank) the statistic is over
    over: str
    source: str
    default: bool = False
    ep: int | None = None
    max_violation: float | None = None


@lru_cache(maxsize=1)
def expert_load_figures() -> tuple[ExpertLoadFigure, ...]:
    """Every figure of catalog/routing/expert_loads.yaml, in file order."""
    return tuple(ExpertLoadFigure(**row) for row in packaged_yaml(_DATA.read_text())["entries"])


def default_load_figure(
    balancing: str | None, coefficient: float | None
) -> ExpertLoadFigure | None:
    """The default figure (``default: true``) measured at this balancing method and coefficient (equal to 1e-12
    relative), or None: a router the table does not match gets no published skew."""
    if balancing is None or coefficient is None:
        return None
    for fig in expert_load_figures():
        if (
            fig.default
            and fig.balancing == balancing
            and fig.coefficient is not None
            and abs(fig.coefficient - coefficient) <= 1e-12 * max(abs(coefficient), 1e-30)
        ):
            return fig
    return None
