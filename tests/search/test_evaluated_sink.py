"""The pruned search's ``evaluated_sink`` (search.run.search): the feasible candidates it evaluates,
the ranked plans among them, and the same result with the sink as without it."""

from __future__ import annotations

import numpy as np
import pytest

from paraplan.catalog import load_model, load_system
from paraplan.search.run import search
from paraplan.search.space import SearchProblem
from paraplan.specs.errors import InputError

METRICS = {"step_time_s", "tokens_per_s", "objective", "peak_memory_gib"}


def problem(**fields) -> SearchProblem:
    base = dict(gpus=64, max_global_batch=512, seq_length=2048, tp=(1, 2, 4), pp=(1, 2, 4))
    return SearchProblem(
        model=load_model("gpt3-13b"), system=load_system("dgx-a100-80gb"), **{**base, **fields}
    )


class Collect:
    def __init__(self) -> None:
        self.batches: list[dict] = []

    def __call__(self, columns: dict) -> None:
        self.batches.append(columns)

    def columns(self) -> dict:
        return {k: np.concatenate([b[k] for b in self.batches]) for k in self.batches[0]}


def summary(result) -> tuple:
    return (
        [(p.plan, p.objective, p.estimate.step_time_s) for p in result.plans],
        result.candidates,
        result.evaluated,
        result.feasible,
        result.rows_evaluated,
        result.nearest_miss,
    )


@pytest.mark.parametrize("blocks", [False, True])
def test_the_sink_gets_the_ranked_plans_and_changes_nothing(blocks):
    p = problem()
    without = search(p, top_k=5, blocks=blocks, workers=1)
    sink = Collect()
    with_sink = search(p, top_k=5, blocks=blocks, workers=1, evaluated_sink=sink)
    assert summary(with_sink) == summary(without)
    columns = sink.columns()
    n = len(columns["step_time_s"])
    # every feasible candidate the search evaluated, once: fewer than the space (pruned)
    assert n == with_sink.feasible < with_sink.candidates
    fields = [k for k in columns if k not in METRICS]
    for ranked in with_sink.plans:
        plan = ranked.plan.model_dump()
        hits = [i for i in range(n) if all(columns[k][i] == plan[k] for k in fields)]
        assert len(hits) == 1, ranked.plan
        assert columns["objective"][hits[0]] == ranked.objective
        assert columns["step_time_s"][hits[0]] == ranked.estimate.step_time_s


def test_the_sink_is_refused_where_it_has_no_meaning():
    with pytest.raises(InputError, match="evaluated_sink"):
        search(problem(objective="robust"), top_k=3, evaluated_sink=Collect())
    with pytest.raises(InputError, match="evaluated_sink"):
        search(problem(), top_k=3, evaluated_sink=Collect(), feasible_sink=Collect())
