"""Issue 37: the per-stage path (search --cluster, search --non-uniform, estimate --plan with a stage
plan, and the API's HeteroProblem) priced every block as a dense decoder layer, so a mixture-of-experts
or MLA model searched there came back as a dense plan (a plan "at 0.83 s" needing 787 GiB per GPU).
The per-stage searches refuse such a model by name, at exit 2, before any candidate is costed;
``estimate --plan`` prices its MoE / MLA layers as the uniform path does since issue 31
(tests/unit/test_one_path_moe.py), checking the plan against the model's own blocks."""

from __future__ import annotations

import json

import pytest
import yaml

from paraplan.catalog import load_model, load_system
from paraplan.search.staged.hetero import HeteroProblem
from paraplan.catalog.clusters import cluster_from_dict
from paraplan.specs.cluster import uniform_cluster
from paraplan.specs.errors import InputError

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


@pytest.mark.parametrize("name", MOE_OR_MLA)
def test_search_cluster_refuses_moe_and_mla_by_name(cli, cluster_file, name):
    argv = ["search", "-m", name, "--cluster", cluster_file, "--global-batch", "64"]
    _, out, err = cli(*argv, codes=(2,))
    assert f"model: {name!r} is not allowed" in err and "mixture-of-experts / MLA" in err, err
    assert not out


@pytest.mark.parametrize("name", MOE_OR_MLA[:2])
def test_search_non_uniform_refuses_moe_and_mla_by_name(cli, name):
    argv = ["search", "-m", name, "-s", "dgx-h100-80gb", "--gpus", "16", "--non-uniform"]
    _, _, err = cli(*argv, "--global-batch", "64", codes=(2,))
    assert f"model: {name!r} is not allowed" in err, err


def test_the_api_problem_refuses_them_and_keeps_dense_models():
    cluster = cluster_from_dict(CLUSTER)
    with pytest.raises(InputError, match="model: 'deepseek-v3' is not allowed"):
        HeteroProblem(load_model("deepseek-v3"), cluster, 64, 2048)
    HeteroProblem(load_model("gpt3-1.3b"), cluster, 64, 2048)  # a dense model is searched


def test_estimate_with_a_stage_plan_is_checked_against_the_moe_model(cli, cluster_file, tmp_path):
    """A dense model's per-stage plan given for Mixtral: refused by the rule it breaks (its blocks do not cover
    Mixtral's 34), not priced as dense layers; the searches' API problem still refuses an MoE model by name."""
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
    uniform = uniform_cluster(load_system("dgx-h100-80gb"), 16)
    with pytest.raises(InputError, match="'mixtral-8x7b'"):
        HeteroProblem(load_model("mixtral-8x7b"), uniform, 64, 2048)
