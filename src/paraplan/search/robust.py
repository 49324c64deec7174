"""``--objective robust``: rank plans by the pessimistic end of their error band.

A plan's robust objective is its time per token at the pessimistic end of its error band
(``validate.band.error_band``: the step time divided by one plus the most negative validation
residual among the features the plan uses, at least ``RUN_TO_RUN_PCT`` slower; unvalidated
features take the widest range of any case of the same model kind). A plan that leans on knobs no
published run validates therefore loses to a validated plan that is predicted slightly slower.

The band depends on the plan's features, not on its time, so it is computed only for the plans a
time search returns, never for the whole space. The ranking stays exact with respect to the band:
every band's pessimistic factor is at least ``1 / (1 − RUN_TO_RUN_PCT/100)``, so a plan outside
the time search's top k (time per token ≥ the k-th's, ``t_k``) has a robust objective of at least
``t_k`` times that factor, the bound search.rerank.rerank_exactly stops at (the loop the time-to-train
objectives share): up to ``MAX_TIME_GROUPS`` groups (beyond that the ranking covers the best ``MAX_TIME_GROUPS`` by time,
and the result says so in ``robust_exact``). ``--csv-all`` (every candidate) is refused: its
objective column would need a band per candidate.
"""

from __future__ import annotations

import functools

from paraplan.search.rerank import MAX_TIME_GROUPS, rerank_exactly  # noqa: F401 (MAX_TIME_GROUPS named here too)
from paraplan.search.space import SearchProblem
from paraplan.specs.errors import InputError
from paraplan.validate.band import RUN_TO_RUN_PCT, error_band

MIN_PESSIMISTIC_FACTOR = 1.0 / (1.0 - RUN_TO_RUN_PCT / 100.0)  # every band is at least this wide


def pessimistic_factor(problem: SearchProblem, plan) -> float:
    """(pessimistic end of the band) / (predicted step time) for ``plan``: validate.band.error_band at 1 s."""
    return error_band(problem.model, problem.system, plan, 1.0, problem.framework).high_s


def robust_search(problem: SearchProblem, top_k: int, run, **options):
    """Top-K plans by the robust objective (module docstring). ``run`` is the time search to call
    (``search.run.search`` or ``exhaustive_search``) with ``options``; its result comes back with
    ranks and objectives replaced and ``robust_exact`` set."""
    if options.get("collect_all") or options.get("feasible_sink") is not None:
        raise InputError(
            "--csv-all: not available with --objective robust (the error band is computed for the "
            "ranked plans only, not for every candidate); use --objective time for --csv-all"
        )
    result, exact = rerank_exactly(
        problem,
        top_k,
        run,
        lambda p: p.objective * pessimistic_factor(problem, p.plan),
        lambda time_per_token: time_per_token * MIN_PESSIMISTIC_FACTOR,
        **options,
    )
    best = result.plans[0].objective if result.plans else float("inf")
    rescored = (
        {**item, "objective": item["objective"] * pessimistic_factor(problem, item["plan"])}
        for item in result.faster_infeasible
    )
    result.faster_infeasible = [item for item in rescored if item["objective"] < best]
    result.robust_exact = exact
    return result


def evaluated_sink_refused() -> InputError:
    """The error for ``evaluated_sink`` beside the robust objective, ``collect_all`` or
    ``feasible_sink`` (search.run.search)."""
    return InputError(
        "evaluated_sink: not available with objective robust, collect_all or feasible_sink "
        "(use feasible_sink for every feasible plan)"
    )


def robust_dispatch(run):
    """Wraps a time search ``run(problem, top_k, **options)`` (``search.run.search``,
    ``exhaustive_search``): a problem at objective "robust" is checked and goes through
    robust_search with ``run`` itself as the time search; any other goes to ``run``."""

    @functools.wraps(run)
    def dispatch(problem: SearchProblem, top_k: int = 10, **options):
        if problem.objective == "robust":  # ranked by the band's pessimistic end (module docstring)
            problem.check()
            if options.get("evaluated_sink") is not None:
                raise evaluated_sink_refused()
            return robust_search(problem, top_k, run, **options)
        return run(problem, top_k, **options)

    return dispatch
