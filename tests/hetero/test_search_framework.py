"""``paraplan search --cluster`` and ``--non-uniform`` take ``--framework`` (issue 31): the per-stage searches
price with the profile's stack and plan defaults exactly as ``estimate --plan --framework`` does, so every
returned plan passes the per-stage plan check and re-estimates to the same step time through it."""

from __future__ import annotations

import json
import random

import pytest
import yaml

from paraplan.catalog import load_framework, load_system
from paraplan.cost.frameworks import framework_cluster, framework_plan_fields
from paraplan.search.staged.hetero import HeteroProblem, profile_fields, search_cluster
from paraplan.search.staged.non_uniform import search_non_uniform
from paraplan.catalog.clusters import cluster_from_dict
from paraplan.specs.cluster import uniform_cluster
from paraplan.specs.model import ModelSpec
from paraplan.specs.stage_plan import check_stage_plan, stage_plan_from_dict, stage_plan_to_dict
from paraplan.step.per_stage import estimate_stage_plan
from tests.hetero.test_hetero_cli_and_cases import MIXED, MODEL, run

REL = 1e-9
FRAMEWORKS = ("torchtitan", "pytorch-eager", "megatron-deepspeed", "hf-transformers")


def re_estimate(model, cluster, framework: str, plan) -> float:
    """The plan's step time as ``estimate --plan --framework`` prices it (cli.hetero_cmd.estimate_plan_file)."""
    profile = load_framework(framework)
    data = framework_plan_fields(profile, stage_plan_to_dict(plan))
    est = estimate_stage_plan(
        model, framework_cluster(profile, cluster), stage_plan_from_dict(data)
    )
    return est.step_time_s


@pytest.mark.parametrize("mode", ["--cluster", "--non-uniform"])
@pytest.mark.parametrize("framework", ["torchtitan", "megatron-deepspeed"])
def test_search_takes_the_framework(capsys, tmp_path, monkeypatch, mode, framework):
    monkeypatch.setenv("COLUMNS", "200")
    model = tmp_path / "model.yaml"
    model.write_text(yaml.safe_dump(MODEL))
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(MIXED))
    where = ["--cluster", str(cluster)] if mode == "--cluster" else []
    where += ["--system", "dgx-a100-80gb", "--gpus", "8", "--non-uniform"] * (mode != "--cluster")
    argv = ["search", "-m", str(model), *where, "--global-batch", "16", "--seq-length", "512"]
    argv += ["--dtype", "fp16", "--top", "3", "--time-budget", "5", "--json"]
    code, out, err = run(capsys, *argv, "--framework", framework)
    assert code == 0, err
    found = json.loads(out)["plans"]
    code, plain, err = run(capsys, *argv)
    assert code == 0, err
    assert found and [p["step_time_s"] for p in found] != [  # the profile is not ignored
        p["step_time_s"] for p in json.loads(plain)["plans"]
    ]
    for row in found:
        path = tmp_path / "plan.yaml"
        path.write_text(yaml.safe_dump(row["plan"]))
        place = (
            ["--cluster", str(cluster)] if mode == "--cluster" else ["--system", "dgx-a100-80gb"]
        )
        argv = ["estimate", "-m", str(model), "--plan", str(path), *place, "--framework", framework]
        code, out, err = run(capsys, *argv, "--json")
        assert code in (0, 1), err
        assert json.loads(out)["step_time_s"] == pytest.approx(row["step_time_s"], rel=REL)


def test_search_refuses_an_unknown_framework(capsys):
    argv = ["search", "-m", "gpt3-125m", "--system", "dgx-a100-80gb", "--gpus", "8"]
    code, _, err = run(capsys, *argv, "--non-uniform", "--global-batch", "8", "--framework", "nope")
    assert code == 2 and "--framework" in err and "Traceback" not in err


def draw_problem(rng: random.Random):
    """A small problem: a 2-6 layer decoder on 4 or 8 GPUs of one system or the mixed cluster, a profile
    other than the default, a global batch of 8-32; the AMP-style or the Aceso-style search."""
    layers = rng.choice((2, 4, 6))
    model = ModelSpec(name=f"tiny{layers}", **(MODEL | {"layers": layers}))
    if rng.random() < 0.5:
        cluster = cluster_from_dict(MIXED)
    else:
        cluster = uniform_cluster(load_system(rng.choice(("dgx-a100-80gb", "dgx-h100-80gb"))), 8)
    return model, cluster, rng.choice(FRAMEWORKS), rng.choice((8, 16, 32)), rng.random() < 0.5


def test_every_searched_plan_checks_and_re_estimates_under_the_framework():
    rng = random.Random(31)
    checked = 0
    for _ in range(6):
        model, cluster, framework, batch, non_uniform = draw_problem(rng)
        priced, fields = profile_fields(load_framework(framework), cluster)
        dtype = "fp16" if cluster.name == "mixed" else "bf16"
        problem = HeteroProblem(model, priced, batch, 512, dtype, **fields)
        search = search_non_uniform if non_uniform and cluster.is_uniform else search_cluster
        result = search(problem, top_k=3, time_budget_s=3.0)
        for c in result.plans:
            check_stage_plan(c.plan, model, priced)
            assert re_estimate(model, cluster, framework, c.plan) == pytest.approx(
                c.step_time_s, rel=REL
            ), (framework, c.label)
            checked += 1
    assert checked >= 6
