"""``search --expert-load-cv`` (issue 33): the learned router's expert spread is a fixed input of the search, applied
to every candidate as ``estimate --expert-load-cv`` applies it, so a search row re-estimates identically; bad values
are one line naming the field, the value and the allowed range (specs.rules_moe.expert_load_cv_rule)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings, strategies as st

from paraplan.catalog import load_model, load_system
from paraplan.graph.routing import published_expert_cv
from paraplan.search.exhaustive import exhaustive_search
from paraplan.search.run import search
from paraplan.search.space import SearchProblem
from paraplan.specs.errors import InputError
from paraplan.specs.rules_moe import expert_load_cv_rule
from paraplan.step.estimate import estimate


def qwen_problem(**fields) -> SearchProblem:
    """Qwen3-30B-A3B (128 experts, top-8, a published router spread) on two H100 nodes: a few hundred candidates."""
    base = dict(
        model=load_model("qwen3-30b-a3b"),
        system=load_system("dgx-h100-80gb"),
        gpus=16,
        seq_length=4096,
        global_batch=32,
        tp=(1,),
        pp=(1, 2),
        micro_batch=(1,),
        recompute=("full",),
        zero=(1,),
        ep=(4, 8, 16),
        dispatchers=("alltoall",),
        vary_offload=False,
        vary_placement=False,
    )
    return SearchProblem(**{**base, **fields})


def _assert_rows_reestimate(problem: SearchProblem, result) -> None:
    assert result.plans
    for row in result.plans:
        assert row.plan.expert_load_cv == problem.expert_load_cv
        again = estimate(problem.model, problem.system, row.plan)
        assert math.isclose(again.step_time_s, row.estimate.step_time_s, rel_tol=1e-12)
        assert math.isclose(
            again.peak_stage.peak_bytes, row.estimate.peak_stage.peak_bytes, rel_tol=1e-12
        )


def test_bound_is_the_spread_of_k_experts_taking_every_choice():
    """c² = E·Σp² − 1 with 0 <= p <= 1/k: at most E/k − 1 (hand values: 128/8 − 1 = 15, 256/8 − 1 = 31, 8/2 − 1 = 3)."""
    qwen, dsv3, mixtral = (load_model(n) for n in ("qwen3-30b-a3b", "deepseek-v3", "mixtral-8x7b"))
    assert expert_load_cv_rule(qwen, math.sqrt(15.0)) is None
    assert "= 3.873 for qwen3-30b-a3b" in expert_load_cv_rule(qwen, 3.9)
    assert expert_load_cv_rule(dsv3, 5.5) is None and expert_load_cv_rule(dsv3, 5.6)
    assert expert_load_cv_rule(mixtral, 1.732) is None and expert_load_cv_rule(mixtral, 1.733)
    assert expert_load_cv_rule(mixtral, -0.01) and expert_load_cv_rule(mixtral, math.inf)
    assert expert_load_cv_rule(mixtral, None) is None
    assert "mixture-of-experts" in expert_load_cv_rule(load_model("llama3-8b"), 0.2)
    # every published default the catalog prices lies inside the range
    for model in (qwen, dsv3, load_model("qwen3-235b-a22b")):
        cv = published_expert_cv(model.router_balancing, model.router_balance_coeff)
        assert expert_load_cv_rule(model, cv) is None


def test_search_rows_carry_the_spread_and_reestimate_identically():
    """The fast search equals the exhaustive one at a stated spread, every row states it and re-estimates to the same
    step time and peak; a wider spread is slower than the published default on the same plan."""
    problem = qwen_problem(expert_load_cv=1.5)
    fast = search(problem, top_k=5)
    _assert_rows_reestimate(problem, fast)
    slow = exhaustive_search(problem, top_k=5)
    assert [r.plan for r in fast.plans] == [r.plan for r in slow.plans]
    best = fast.plans[0].plan
    default = estimate(
        problem.model, problem.system, best.model_copy(update={"expert_load_cv": None})
    )
    assert default.step_time_s < fast.plans[0].estimate.step_time_s


@settings(max_examples=4, deadline=None)
@given(cv=st.floats(min_value=0.0, max_value=math.sqrt(15.0)))
def test_any_allowed_spread_reestimates_identically(cv):
    problem = qwen_problem(expert_load_cv=cv, pp=(1,), ep=(8, 16))
    _assert_rows_reestimate(problem, search(problem, top_k=3))


def test_search_problem_refuses_a_spread_the_router_cannot_have():
    with pytest.raises(InputError, match=r"expert_load_cv: 4\.0 is not allowed; allowed: 0 <= "):
        qwen_problem(expert_load_cv=4.0).check()
    with pytest.raises(InputError, match="needs a mixture-of-experts model"):
        SearchProblem(
            load_model("llama3-8b"),
            load_system("dgx-h100-80gb"),
            gpus=8,
            seq_length=2048,
            global_batch=8,
            expert_load_cv=0.3,
        ).check()


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    from paraplan.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_info.value.code or 0, out, err


SEARCH = (
    "search -m qwen3-30b-a3b -s dgx-h100-80gb --gpus 16 --global-batch 32 --seq-length 4096 --tp 1 --pp 1 "
    "--micro-batch 1 --recompute full --zero 1 --ep 8,16 --dispatcher alltoall --no-offload "
    "--default-placement --default-overlap --top 2"
).split()


def test_cli_search_takes_the_spread_and_estimate_reproduces_its_row(capsys, tmp_path):
    code, out, _ = _cli(capsys, *SEARCH, "--expert-load-cv", "0.9", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["problem"]["expert_load_cv"] == 0.9
    row = doc["plans"][0]
    assert row["plan"]["expert_load_cv"] == 0.9
    path = tmp_path / "search.json"
    path.write_text(out)
    code, out, _ = _cli(capsys, "estimate", "--plan", f"{path}#1", "--json")
    assert code == 0
    again = json.loads(out)
    assert again["plan"]["expert_load_cv"] == 0.9
    assert math.isclose(again["step_time_s"], row["step_time_s"], rel_tol=1e-12)


@pytest.mark.parametrize(
    "value, says",
    [
        (
            "-0.1",
            "expert_load_cv: -0.1 is not allowed; allowed: 0 <= expert_load_cv <= √(experts/top_k − 1) = 3.873",
        ),
        (
            "4",
            "expert_load_cv: 4.0 is not allowed; allowed: 0 <= expert_load_cv <= √(experts/top_k − 1) = 3.873",
        ),
        ("inf", "--expert-load-cv: inf is not allowed; must be a finite number"),
    ],
)
def test_cli_search_refuses_a_bad_spread_in_one_line(capsys, value, says):
    code, out, err = _cli(capsys, *SEARCH, "--expert-load-cv", value)
    text = (out + err).strip()
    assert code == 2 and len(text.splitlines()) == 1 and "Traceback" not in text
    assert says in text


def test_cli_search_names_the_spread_it_priced(capsys):
    code, out, _ = _cli(capsys, *SEARCH, "--expert-load-cv", "0.9", "--width", "250")
    assert code == 0 and ", expert load cv 0.9" in out.splitlines()[0]
    code, out, _ = _cli(capsys, *SEARCH, "--json")
    assert "expert_load_cv" not in json.loads(out)["problem"]  # unstated: the published figure


def test_estimate_fit_hint_searches_at_the_plans_spread(capsys):
    """A plan that does not fit suggests the search's fastest plan at the same router spread, and says how."""
    code, out, _ = _cli(
        capsys,
        *"estimate -m qwen3-30b-a3b -s dgx-h100-80gb --gpus 8 --ep 8 --global-batch 64 --micro-batch 8".split(),
        *"--seq-length 8192 --expert-load-cv 1.2 --width 250".split(),
    )
    assert code == 1 and "--expert-load-cv 1.2)" in out
