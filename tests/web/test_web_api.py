"""The web explorer's JSON API through Starlette's TestClient (no browser): every endpoint, bad
input with the CLI's one-line error, the size limit, cancel and the time limit of a long search."""

from __future__ import annotations

import json

import pytest

pytest.importorskip(
    "starlette", reason="the web extra is not installed: pip install 'paraplan[web]'"
)

from starlette.testclient import TestClient
from web_helpers import (
    CLUSTER,
    MOE_CLUSTER,
    SMALL,
    SWEEP,
    cluster_search,
    moe_cluster_search,
    wait,
)

from paraplan import api
from paraplan.web.app import MAX_BODY, create_app

LONG = {  # every feasible plan of GPT-3 175B on 1,024 GPUs: minutes of work
    "model": "gpt3-175b",
    "system": "dgx-a100-80gb",
    "gpus": "1024",
    "max-global-batch": "1024",
    "all": "1",
}


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(time_limit_s=120)) as c:
        yield c


@pytest.fixture(scope="module")
def searched(client):
    job = client.post("/api/search", json={"params": SMALL}).json()
    return wait(client, job["id"])


def test_the_page_and_its_static_files_are_served(client):
    page = client.get("/")
    assert page.status_code == 200 and "plan explorer" in page.text
    assert client.get("/static/app.js").status_code == 200
    plotly = client.get("/static/plotly.min.js")
    assert plotly.status_code == 200 and len(plotly.content) > 1_000_000


@pytest.mark.parametrize("name", ["../app.py", "..%2Fapp.py", "%2Fetc%2Fpasswd", "params.py"])
def test_no_other_file_is_served(client, name):
    assert client.get(f"/static/{name}").status_code == 404


def test_the_catalog_lists_models_systems_frameworks(client):
    names = client.get("/api/catalog").json()
    assert "gpt3-175b" in names["models"] and "dgx-a100-80gb" in names["systems"]
    assert "torchtitan" in names["frameworks"]


def test_a_search_gives_the_same_plans_as_the_api(client, searched):
    assert searched["state"] == "done", searched
    doc = searched["result"]
    found = api.search(
        "gpt3-13b",
        "dgx-a100-80gb",
        64,
        max_global_batch=512,
        seq_length=2048,
        tp=(1, 2, 4),
        pp=(1, 2, 4),
        top=5,
    ).to_dict()
    assert [p["plan"] for p in doc["plans"]] == [p["plan"] for p in found["plans"]]
    assert [p["step_time_s"] for p in doc["plans"]] == [p["step_time_s"] for p in found["plans"]]
    assert [p["error_band"] for p in doc["plans"]] == [p["error_band"] for p in found["plans"]]
    assert doc["explain"] and {"knob", "verdict", "reason"} <= set(doc["explain"][0])
    # the scatter: the feasible plans the search evaluated, one point per cell, the ranked plans marked
    assert doc["scatter_rule"] == "evaluated" and doc["scatter_plans"] == doc["feasible"]
    assert sum(p["plans"] for p in doc["scatter"]) == doc["feasible"]
    assert len(doc["plans"]) < len(doc["scatter"]) < doc["feasible"]
    assert doc["scatter"][0]["rank"] == 1
    # the fields every point shares are sent once (web.work.shared_fields)
    assert {**doc["scatter_base"], **doc["scatter"][0]["plan"]} == doc["plans"][0]["plan"]
    assert all(not set(p["plan"]) & set(doc["scatter_base"]) for p in doc["scatter"])


def test_the_event_stream_ends_with_the_result(client, searched):
    with client.stream("GET", f"/api/jobs/{searched['id']}/events") as stream:
        lines = [line for line in stream.iter_lines() if line.startswith("data: ")]
    assert '"state": "done"' in lines[-1]


@pytest.mark.parametrize(
    "change, field, message",
    [
        ({"gpus": "abc"}, "gpus", "--gpus: 'abc' is not an integer"),
        ({"gpus": "0"}, "gpus", "--gpus: 0 is not allowed; allowed: 1 to 1,048,576"),
        ({"model": "gpt3-999b"}, "model", "--model: 'gpt3-999b' is not in the catalog"),
        ({"model": "/etc/passwd"}, "model", "--model: '/etc/passwd' is not in the catalog"),
        ({"tp": "1,x"}, "tp", "--tp: '1,x' is not a comma-separated list of integers"),
        ({"recompute": "some"}, "recompute", "--recompute: 'some' is not allowed"),
        ({"objective": "fast"}, "objective", "--objective: 'fast' is not allowed"),
        ({"price": "-1"}, "price", "--price: -1.0 is not allowed"),
        ({"price": "cheap"}, "price", "--price: 'cheap' is not a number of USD per GPU-hour"),
        ({"objective": "time-to-train"}, "tokens", "--tokens: --objective time-to-train needs"),
        ({"cluster-text": "pools: []\n", "gpus": "8"}, "gpus", "--gpus: is not available with"),
        ({"tokens": "lots"}, "tokens", "--tokens: 'lots' is not a number of tokens"),
        ({"global-batch": "512"}, "global-batch", "--global-batch: give exactly one of"),
        ({"colour": "red"}, "colour", "--colour: is not an option of the page"),
        ({"model-text": "a: [1"}, "model-text", "--model-text: the pasted text is not valid YAML"),
    ],
)
def test_bad_input_is_the_clis_one_line_error_naming_the_field(client, change, field, message):
    response = client.post("/api/search", json={"params": {**SMALL, **change}})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["field"] == field and error["message"].startswith(message), error
    assert "\n" not in error["message"] and "Traceback" not in error["message"]


def test_a_pasted_model_is_read_in_memory(client, searched):
    from pathlib import Path

    from paraplan.catalog import __file__ as catalog_init

    text = (Path(catalog_init).parent / "models" / "gpt3-13b.yaml").read_text()
    params = {**SMALL, "model-text": text}
    params.pop("model")
    job = client.post("/api/search", json={"params": params}).json()
    done = wait(client, job["id"])
    assert done["state"] == "done", done
    plans = [p["step_time_s"] for p in done["result"]["plans"]]
    assert plans == [p["step_time_s"] for p in searched["result"]["plans"]]


def test_a_body_over_the_limit_is_refused(client):
    big = {"params": {**SMALL, "model-text": "x" * (MAX_BODY + 1)}}
    response = client.post("/api/search", json=big)
    assert response.status_code == 413
    assert "over 1,048,576 bytes" in response.json()["error"]["message"]


def test_a_body_that_is_not_json_is_refused(client):
    response = client.post("/api/search", content=b"{not json")
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "request: the body is not valid JSON"


def test_estimate_export_and_what_if_of_a_plan(client, searched):
    best = searched["result"]["plans"][0]
    body = {"params": SMALL, "plan": best["plan"]}
    detail = client.post("/api/estimate", json=body).json()
    assert detail["step_time_s"] == best["step_time_s"]
    assert detail["memory"]["per_stage"] and detail["timeline"]["bars"]
    assert "communication" in detail
    what_if = client.post(
        "/api/estimate", json={**body, "plan": {**best["plan"], "micro_batch": 1}}
    ).json()
    assert what_if["plan"]["micro_batch"] == 1
    for to in ("megatron", "nemo", "megatron-bridge", "torchtitan", "deepspeed"):
        out = client.post("/api/export", json={**body, "to": to})
        assert out.status_code == 200, out.text
        assert out.json()["text"] == api.export(best["plan"], to, "gpt3-13b", 8, "paraplan serve")


def test_the_megatron_bridge_export_writes_the_recipe_of_the_pages_framework(client):
    """The Megatron-Bridge button's export (/api/export to megatron-bridge) is the CLI's: the same
    export function, with the fp8 recipe of the framework profile the page searched with
    (megatron-bridge-25.11: current scaling), so the file names the recipe the plan was priced with."""
    from paraplan.catalog import load_framework
    from paraplan.export import export_plan
    from paraplan.specs.plan import PlanSpec

    params = {**SMALL, "framework": "megatron-bridge-25.11", "dtype": "fp8"}
    plan = {"gpus": 64, "tp": 2, "pp": 2, "micro_batch": 1, "global_batch": 64, "seq_length": 2048,
            "dtype": "fp8", "sequence_parallel": True, "zero": 1}  # fmt: skip
    out = client.post("/api/export", json={"params": params, "plan": plan, "to": "megatron-bridge"})
    assert out.status_code == 200, out.text
    assert out.json()["filename"] == "plan-megatron-bridge.py"
    text = out.json()["text"]
    assert "get_mixed_precision_config('bf16_with_fp8_current_scaling_mixed')" in text
    model = api.load_model("gpt3-13b")
    recipe = load_framework("megatron-bridge-25.11").fp8_recipe
    cli = export_plan("megatron-bridge", PlanSpec(**plan), model, 8, "paraplan serve", recipe)
    assert text == cli


def test_bad_plan_and_bad_export_target_are_one_line(client, searched):
    best = searched["result"]["plans"][0]
    bad_plan = client.post(
        "/api/estimate", json={"params": SMALL, "plan": {**best["plan"], "tp": 3}}
    )
    assert bad_plan.status_code == 400 and "\n" not in bad_plan.json()["error"]["message"]
    bad_to = client.post("/api/export", json={"params": SMALL, "plan": best["plan"], "to": "jax"})
    assert bad_to.json()["error"]["message"].startswith("to: 'jax' is not allowed")


def test_a_sweep_runs_one_search_per_gpu_count(client):
    job = client.post("/api/sweep", json={"params": SMALL, "gpus-list": "32,64"}).json()
    done = wait(client, job["id"])
    assert done["state"] == "done", done
    assert [p["gpus"] for p in done["result"]["points"]] == [32, 64]
    bad = client.post("/api/sweep", json={"params": SMALL, "gpus-list": "a"}).json()
    failed = wait(client, bad["id"])
    assert failed["state"] == "error" and failed["error"]["field"] == "gpus-list"
    assert failed["error"]["message"].startswith("--gpus: 'a'"), failed


def test_two_searches_at_once_both_finish(client):
    first = client.post("/api/search", json={"params": SMALL}).json()
    second = client.post("/api/search", json={"params": {**SMALL, "top": "3"}}).json()
    assert wait(client, first["id"])["state"] == "done"
    assert len(wait(client, second["id"])["result"]["plans"]) == 3


def test_a_long_search_is_cancelled_and_its_worker_ends(client):
    job = client.post("/api/search", json={"params": LONG}).json()
    response = client.delete(f"/api/jobs/{job['id']}")
    assert response.json()["state"] == "cancelled"
    process = client.app.state.jobs.jobs[job["id"]].process
    process.join(10)
    assert not process.is_alive()


def test_a_search_past_the_time_limit_is_stopped():
    with TestClient(create_app(time_limit_s=1.0)) as c:
        job = c.post("/api/search", json={"params": LONG}).json()
        done = wait(c, job["id"], 30)
    assert done["state"] == "error"
    assert "ran past the time limit of 1 s" in done["error"]["message"]


def test_an_unknown_job_is_one_line(client):
    response = client.get("/api/jobs/nope")
    assert response.status_code == 400 and "is not a job of this server" in response.text


def test_the_page_shows_what_the_cli_prints_with_json(cli, searched):
    """The query string's options are the CLI's: the same search by ``paraplan search --json``."""
    import json

    argv = [f"--{k}={v}" for k, v in SMALL.items()]
    code, out, _ = cli("search", *argv, "--json", "--explain")
    assert code == 0
    printed = json.loads(out)
    doc = searched["result"]
    assert doc["plans"] == printed["plans"]
    assert doc["explain"] == printed["explain"]
    assert {k: v for k, v in doc.items() if k in printed and k != "timing"} == {
        k: v for k, v in printed.items() if k in doc and k != "timing"
    }


def test_an_encoder_decoder_is_refused_in_one_line_naming_the_model(client):
    job = client.post(
        "/api/search", json={"params": {**SMALL, "model": "t5-3b", "gpus": "16"}}
    ).json()
    done = wait(client, job["id"])
    assert done["state"] == "error" and done["error"]["field"] == "model"
    assert done["error"]["message"].startswith("model.architecture: 'encoder_decoder'")
    assert "\n" not in done["error"]["message"]


def test_a_cluster_of_pools_runs_the_cluster_search(client):
    """Pasted pools (``search --cluster``'s schema): the AMP-style search's --json document."""
    params = {"model": "gpt3-1.3b", "cluster-text": CLUSTER, "global-batch": "32", "top": "3"}
    params |= {"tp": "1,2", "pp": "1,2"}
    job = client.post("/api/search", json={"params": params}).json()
    done = wait(client, job["id"])
    assert done["state"] == "done", done
    doc = done["result"]
    found = cluster_search()
    assert doc["kind"] == "cluster" and doc["plans"]
    assert [p["label"] for p in doc["plans"]] == [p["label"] for p in found["plans"]]


def test_a_pasted_cluster_names_catalog_systems_only(client):
    text = "pools:\n  - {name: a, system: /etc/passwd, nodes: 1}\n"
    params = {"model": "gpt3-1.3b", "cluster-text": text, "global-batch": "32"}
    job = client.post("/api/search", json={"params": params}).json()
    done = wait(client, job["id"])
    assert done["state"] == "error" and done["error"]["field"] == "cluster-text"
    assert done["error"]["message"].startswith("cluster.pools[0].system: '/etc/passwd' is not")


def test_a_moe_cluster_request_gives_the_plans_of_search_cluster(client):
    """The page's cluster search of an MoE model with ep, etp, dispatcher, expert-load-cv, cp, schedule
    and time-budget: the plans (labels, step times) and the space of api.search_cluster given them."""
    job = client.post("/api/search", json={"params": MOE_CLUSTER}).json()
    done = wait(client, job["id"])
    assert done["state"] == "done", done
    doc = done["result"]
    found = moe_cluster_search()
    assert found["plans"] and found["finished"]
    assert [(p["label"], p["step_time_s"]) for p in doc["plans"]] == [
        (p["label"], p["step_time_s"]) for p in found["plans"]
    ]
    assert (doc["space"], doc["evaluated"]) == (found["space"], found["evaluated"])
    # the options reached the search: without them its space is another
    plain = {k: v for k, v in MOE_CLUSTER.items() if k not in ("cp", "schedule", "dispatcher")}
    other = wait(client, client.post("/api/search", json={"params": plain}).json()["id"])
    assert other["state"] == "done" and other["result"]["space"] < doc["space"], other


def _command(tmp_path, params: dict) -> list[str]:
    """``paraplan search --cluster FILE`` with the page's options ``params`` (the same names), the
    pasted cluster written to FILE."""
    (tmp_path / "cluster.yaml").write_text(params["cluster-text"])
    argv = ["search", "--cluster", str(tmp_path / "cluster.yaml")]
    for flag, value in params.items():
        if flag != "cluster-text":
            argv += [f"--{flag}", value]
    return argv


def test_a_cluster_request_with_a_framework_reads_it_as_the_command(client, cli, tmp_path):
    """A framework with the cluster: its stack and plan defaults, its attention where none is given
    (megatron-lm-2021's is not FlashAttention), the plans of api.search_cluster and of ``paraplan search
    --cluster --framework --json``."""
    params = {"model": "gpt3-1.3b", "cluster-text": CLUSTER, "global-batch": "32", "top": "3"}
    params |= {"tp": "1,2", "pp": "1,2", "framework": "megatron-lm-2021"}
    done = wait(client, client.post("/api/search", json={"params": params}).json()["id"])
    assert done["state"] == "done", done
    steps = [p["step_time_s"] for p in done["result"]["plans"]]
    found = api.search_cluster(
        "gpt3-1.3b",
        CLUSTER,
        32,
        top=3,
        seq_length=2048,
        framework="megatron-lm-2021",
        tps=(1, 2),
        pps=(1, 2),
    )
    assert steps == [p["step_time_s"] for p in found["plans"]] and steps
    code, out, err = cli(*_command(tmp_path, params), "--json")
    assert code == 0, err
    assert steps == [p["step_time_s"] for p in json.loads(out)["plans"]]
    assert steps != [
        p["step_time_s"] for p in cluster_search()["plans"]
    ]  # the profile's, not flash


def test_the_cluster_form_takes_exactly_the_options_of_search_cluster():
    """The page's cluster options are those ``paraplan search --cluster`` honours (its parameters
    that cli.search_cmd.HETERO_SEARCH_OPTIONS and the AMP-style axes let through; any other it
    refuses), less those of the other searches (system, gpus, non-uniform) and of the terminal
    (json, width), its --cluster file pasted as cluster-text: an option the command gains is on the
    page. Each is read by its kind and names a keyword api.search_cluster takes."""
    import inspect
    from dataclasses import fields

    from paraplan.cli import search_cmd
    from paraplan.search.staged import AMP_SEARCH_AXES
    from paraplan.search.staged.hetero import HeteroProblem
    from paraplan.web import params

    parameters = set(inspect.signature(search_cmd.search).parameters) - {"ctx"}
    allowed = search_cmd.HETERO_SEARCH_OPTIONS | set(AMP_SEARCH_AXES)
    assert allowed <= parameters  # every name the command lets through is one of its options
    honoured = {name.replace("_", "-") for name in parameters & allowed}
    honoured -= {"system", "gpus", "non-uniform", "as-json", "width", "cluster"}
    assert params.CLUSTER_OPTIONS - {"model-text", "cluster-text", "plan", "compare"} == honoured
    names = api.catalog_names()
    assert all(params._value({}, f, names) is None for f in honoured - {"model"})
    takes = set(inspect.signature(api.search_cluster).parameters)
    takes |= {f.name for f in fields(HeteroProblem)}
    assert set(params.CLUSTER_KEYWORDS.values()) <= takes


@pytest.mark.parametrize(
    "change, field",
    [
        ({"ep": "4,x"}, "ep"),
        ({"etp": "-1"}, "etp"),
        ({"dispatcher": "fast"}, "dispatcher"),
        ({"schedule": "dualpipe"}, "schedule"),
        ({"cp": "0"}, "cp"),
        ({"cp": "3"}, "cp"),
        ({"schedule": "interleaved"}, "schedule"),
        ({"time-budget": "-1"}, "time-budget"),
        ({"time-budget": "soon"}, "time-budget"),
        ({"expert-load-cv": "nan"}, "expert-load-cv"),
        ({"expert-load-cv": "99"}, "expert-load-cv"),
    ],
)
def test_a_bad_cluster_option_is_the_commands_one_line_error(client, cli, tmp_path, change, field):
    """A bad value of a cluster option: ``search --cluster``'s own one-line error, naming the field
    (refused by the form's reading, 400, or by the search's problem, the job's error)."""
    params = {**MOE_CLUSTER, **change}
    response = client.post("/api/search", json={"params": params})
    if response.status_code == 400:
        error = response.json()["error"]
    else:
        done = wait(client, response.json()["id"])
        assert done["state"] == "error", done
        error = done["error"]
    code, _, err = cli(*_command(tmp_path, params))
    assert code == 2 and err.strip() == f"error: {error['message']}", (err, error)
    assert error["field"] == field


def test_a_time_to_train_objective_ranks_by_goodput(client):
    params = {**SMALL, "objective": "time-to-train", "tokens": "300B"}
    done = wait(client, client.post("/api/search", json={"params": params}).json()["id"])
    assert done["state"] == "done", done
    doc = done["result"]
    found = api.search(
        "gpt3-13b",
        "dgx-a100-80gb",
        64,
        max_global_batch=512,
        tp=(1, 2, 4),
        pp=(1, 2, 4),
        top=5,
        objective="time-to-train",
        tokens=300e9,
    ).to_dict(tokens=300e9)
    assert doc["time_to_train"]["objective"] == "time-to-train"
    assert [p["plan"] for p in doc["plans"]] == [p["plan"] for p in found["plans"]]
    assert len(doc["time_to_train"]["goodput"]) == len(doc["plans"])
    assert doc["scatter_rule"] == "ranked"


def test_a_sweep_file_runs_every_point_with_progress(client):
    """A pasted sweep definition (paraplan sweep's config.json schema): the sweep.json document."""
    job = client.post("/api/sweep", json={"sweep-text": SWEEP}).json()
    done = wait(client, job["id"], 300)
    assert done["state"] == "done", done
    doc = done["result"]
    assert [(p["gpus"], p["accelerator.hbm_bandwidth"]) for p in doc["points"]] == [
        (32, "2TB/s"),
        (32, "3TB/s"),
        (64, "2TB/s"),
        (64, "3TB/s"),
    ]
    assert done["progress"] == {"done": 4, "total": 4, "phase": "sweep points"}
    assert doc == api.sweep(SWEEP)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "model: /etc/passwd\nsystems: [dgx-a100-80gb]\ngpus: [8]\nglobal_batch: 8\n",
            "sweep.model: '/etc/passwd' is not in the catalog",
        ),
        (
            "model: gpt3-13b\nsystems: [dgx-a100-80gb]\ngpus: [8]\nglobal_batch: 8\ncolour: 1\n",
            "sweep.colour: is not a field of a sweep",
        ),
        (
            "model: gpt3-13b\nsystems: [dgx-a100-80gb]\ngpus: 8\nglobal_batch: 8\n",
            "sweep.gpus: 8 is not a list of GPU counts",
        ),
    ],
)
def test_a_bad_sweep_file_is_one_line_next_to_its_field(client, text, message):
    done = wait(client, client.post("/api/sweep", json={"sweep-text": text}).json()["id"])
    assert done["state"] == "error" and done["error"]["field"] == "sweep-text"
    assert done["error"]["message"].startswith(message), done
