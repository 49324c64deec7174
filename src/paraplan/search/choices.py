"""The allowed values of the search's choice options, by the CLI's option name (``--objective``,
``--dtype``, ``--attention``, ``--recompute``, ``--schedule``, ``--dispatcher``): one list for the
CLI's help, the API and the plan explorer's form."""

from __future__ import annotations

from typing import get_args


def option_choices() -> dict[str, tuple[str, ...]]:
    """Option name -> its allowed values (the objectives: search.space's and the time-to-train
    ones, search.time_to_train.OBJECTIVES, which need ``--tokens``: ``objective-needs-tokens``)."""
    from paraplan.search.space import OBJECTIVES
    from paraplan.search.time_to_train import OBJECTIVES as TIME_TO_TRAIN
    from paraplan.specs import moe_plan, plan
    from paraplan.specs.recompute import MODE_NAMES

    return {
        "objective": OBJECTIVES + tuple(TIME_TO_TRAIN),
        "objective-needs-tokens": tuple(TIME_TO_TRAIN),
        "dtype": get_args(plan.PlanDtype),
        "attention": get_args(plan.Attention),
        "recompute": MODE_NAMES,  # specs.recompute modes (op_sac, save_dots: their stacks only)
        "schedule": get_args(plan.Schedule),
        "dispatcher": get_args(moe_plan.Dispatcher),
    }
