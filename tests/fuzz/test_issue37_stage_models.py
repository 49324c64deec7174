"""Issue 37: the per-stage path (search --cluster, search --non-uniform, estimate --plan with a stage
plan, and the API's HeteroProblem) priced every block as a dense decoder layer, so a mixture-of-experts
or MLA model searched there came back as a dense plan (a plan "at 0.83 s" needing 787 GiB per GPU).
Since issue 31 the per-stage path prices MoE / MLA blocks as the uniform path does
(tests/unit/test_one_path_moe.py) and the per-stage searches take such models (their expert layout in every
plan label, tests/hetero/test_stage_moe_search.py); here, under the fuzz contract: they answer within the
bound, with plans that state an expert layout or "no plan found", never a dense reading of the model."""

from __future__ import annotations

import json

import pytest
import yaml

from paraplan.catalog import load_model
from paraplan.catalog.clusters import cluster_from_dict
from paraplan.search.staged.hetero import HeteroProblem

MOE_OR_MLA = ["mixtral-8x7b", "deepseek-v3", "qwen3-30b-a3b", "gpt-oss-120b"]
CLUSTER = {
    "name": "mix",
    "pools": [
        {"name": "h100", "system": "dgx-h100-80gb", "nodes": 1},
        {"name": "a100", "system": "dgx-a100-80gb", "nodes": 1},
    ],
}


@pytest.fixture
def cluster_file(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(CLUSTER))
    return path


def _moe_answer(code: int, out: str, err: str) -> None:
    """A per-stage search of an MoE / MLA model: plans whose labels state the expert layout, or the
    time budget's "no plan found" (exit 1), never a dense plan."""
    if code == 0:
        rows = [line for line in out.splitlines() if "blocks/stage" in line]
        assert rows and all(" ep" in row and "etp" in row for row in rows), out
    else:
        assert code == 1 and "no plan found" in out + err, (code, out, err)


@pytest.mark.parametrize("name", MOE_OR_MLA[:2])
def test_search_cluster_takes_moe_and_mla_models(cli, cluster_file, name):
    argv = ["search", "-m", name, "--cluster", cluster_file, "--global-batch", "64"]
    _moe_answer(*cli(*argv, "--top", "2", "--time-budget", "0.5", codes=(0, 1)))


def test_search_non_uniform_takes_an_moe_model(cli):
    argv = ["search", "-m", "mixtral-8x7b", "-s", "dgx-h100-80gb", "--gpus", "16", "--non-uniform"]
    _moe_answer(*cli(*argv, "--global-batch", "64", "--time-budget", "0.5", codes=(0, 1)))


def test_the_api_problem_takes_moe_mla_and_dense_models():
    cluster = cluster_from_dict(CLUSTER)
    for name in ("deepseek-v3", "gpt3-1.3b"):
        assert HeteroProblem(load_model(name), cluster, 64, 2048).model.name == name


def test_estimate_with_a_stage_plan_is_checked_against_the_moe_model(cli, cluster_file, tmp_path):
    """A dense model's per-stage plan given for Mixtral: refused by the rule it breaks (its blocks do not cover
    Mixtral's 34), not priced as dense layers."""
    code, out, _ = cli(
        "search",
        "-m",
        "gpt3-1.3b",
        "--cluster",
        cluster_file,
        "--global-batch",
        "64",
        "--top",
        "1",
        "--json",
    )
    assert code == 0
    plan = tmp_path / "stages.json"
    plan.write_text(json.dumps(json.loads(out)["plans"][0]["plan"]))
    _, _, err = cli(
        "estimate", "-m", "mixtral-8x7b", "--plan", plan, "--cluster", cluster_file, codes=(2,)
    )
    assert err.startswith("error: plan.stages.") and "(the model has 34 blocks)" in err, err
