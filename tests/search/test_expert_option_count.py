"""SearchProblem.expert_option_count is len(expert_options) whatever the launcher: its shortcut where no launcher
restricts the expert options (search.launch.experts_unrestricted) counts the same options."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.search import launch
from paraplan.search.space import SearchProblem


@pytest.mark.parametrize(
    ("framework", "unrestricted"),
    [(None, True), ("megatron-core", True), ("torchtitan", False), ("deepspeed", False)],
)
def test_experts_unrestricted_names_the_launchers_that_admit_every_option(framework, unrestricted):
    assert launch.experts_unrestricted(framework) is unrestricted


@pytest.mark.parametrize("framework", [None, "megatron-core", "torchtitan", "deepspeed"])
def test_the_count_is_the_options_length(framework):
    problem = SearchProblem(
        model=load_model("mixtral-8x7b"),
        system=load_system("dgx-h100-80gb"),
        gpus=64,
        global_batch=256,
        seq_length=4096,
        framework=framework,
    )
    checked = 0
    for tp, cp, dp, _ in problem.factorizations:
        options = problem.expert_options(tp, cp, dp)
        assert problem.expert_option_count(tp, cp, dp) == len(options)
        checked += bool(options)
    assert checked
