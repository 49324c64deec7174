"""The per-stage searches vary the uniform search's recomputation modes (issue 31: one rule, in
specs.recompute): for every framework profile, and without one, the Aceso-style alleviation switches a
stage to exactly the modes ``search`` varies with that framework that a stage states (the granularities;
op_sac and save_dots are a plan's recompute_modules), and the AMP-style search takes the same modes
from ``--recompute`` and refuses, by name, a policy mode."""

from __future__ import annotations

import pytest

from paraplan.catalog import framework_names, load_framework, load_system
from paraplan.search import launch
from paraplan.search.staged import non_uniform
from paraplan.search.staged.alleviate import StageConfig
from paraplan.search.staged.hetero import HeteroProblem, profile_fields
from paraplan.specs.cluster import uniform_cluster
from paraplan.specs.errors import InputError
from paraplan.specs.model import ModelSpec
from paraplan.specs.recompute import MODES
from tests.hetero.test_hetero_cli_and_cases import MODEL

FRAMEWORKS = (None, *framework_names())
SWIGLU = ModelSpec(name="tiny-swiglu", **(MODEL | {"mlp": "swiglu"}))


class Captured(Exception):
    """Raised by the stand-in alleviation once it has the modes the search passed it."""


def problem_for(framework: str | None, **given) -> HeteroProblem:
    cluster = uniform_cluster(load_system("dgx-a100-80gb"), 8)
    if framework is None:
        return HeteroProblem(SWIGLU, cluster, 16, 512, **given)
    priced, fields = profile_fields(load_framework(framework), cluster)
    return HeteroProblem(SWIGLU, priced, 16, 512, **(fields | given))


def alleviation_modes(framework: str | None, monkeypatch) -> tuple[str, ...]:
    """The modes the non-uniform search hands its alleviation (search.staged.non_uniform._alleviate)."""
    seen: dict[str, tuple[str, ...]] = {}

    def stand_in(start, evaluate, time_budget_s, op_sets=(), modes=()):
        seen["modes"] = tuple(modes)
        raise Captured

    monkeypatch.setattr(non_uniform, "alleviate", stand_in)
    start = (StageConfig(SWIGLU.layers + 2, 8),)
    with pytest.raises(Captured):
        non_uniform._alleviate(problem_for(framework), start, 1, 1.0)
    return seen["modes"]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_alleviation_varies_the_uniform_search_modes(framework, monkeypatch):
    uniform = launch.recompute_modes(framework)
    staged = alleviation_modes(framework, monkeypatch)
    assert staged == tuple(m for m in uniform if not MODES[m].modules), (framework, uniform)
    if not any(MODES[m].modules for m in uniform):  # a stack without a policy mode: the very same
        assert staged == uniform


def test_the_stacks_differ_in_their_modes(monkeypatch):
    """The rule is per framework, not one tuple: deepspeed drops selective, megatron-core keeps it."""
    assert "selective" not in alleviation_modes("deepspeed", monkeypatch)
    assert "selective" in alleviation_modes("megatron-core", monkeypatch)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_amp_search_takes_the_stage_modes_and_refuses_policy_modes(framework):
    staged = launch.stage_recompute_modes(framework)
    assert problem_for(framework, recompute=staged).recompute == staged
    for mode in launch.recompute_modes(framework):
        if MODES[mode].modules:
            with pytest.raises(InputError, match=f"recompute: '{mode}' is not allowed per stage"):
                problem_for(framework, recompute=(mode,))
