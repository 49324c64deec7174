"""``paraplan estimate --goodput`` and ``paraplan validate --goodput`` end to end (issue 36): the first test
runs ``python -m paraplan`` in a process; the others run the same command lines in-process (``run``: conftest's
``cli``), which tests what they print and their exit status without a Python start-up per command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

BASE = ["-m", "gpt3-1.3b", "-s", "dgx-a100-80gb", "--gpus", "8"]
GOODPUT_KEYS = (
    "effective_training_time_ratio",
    "checkpoint_interval_s",
    "expected_failures",
    "days_p10",
    "days_p50",
    "days_p90",
    "energy_mwh",
)


def run_process(*args: str) -> subprocess.CompletedProcess:
    """``python -m paraplan *args`` in a new process."""
    return subprocess.run(
        [sys.executable, "-m", "paraplan", *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture()
def run(cli):
    """``run(*args)``: ``paraplan *args`` in-process (conftest's ``cli``), as a CompletedProcess."""

    def call(*args: str) -> subprocess.CompletedProcess:
        code, out, err = cli(*args)
        return subprocess.CompletedProcess(args, code, out, err)

    return call


def test_estimate_goodput_json_and_text():
    """The one command run in a new process here (the others run in-process)."""
    run = run_process
    out = run("estimate", *BASE, "--tokens", "26B", "--goodput", "--json")
    assert out.returncode == 0, out.stderr
    good = json.loads(out.stdout)["goodput"]
    for key in GOODPUT_KEYS:
        assert isinstance(good[key], float) and good[key] >= 0, key
    assert 0 < good["effective_training_time_ratio"] <= 1
    assert good["days_p10"] <= good["days_p50"] <= good["days_p90"]
    text = run("estimate", *BASE, "--tokens", "26B", "--goodput")
    assert text.returncode == 0, text.stderr
    assert "goodput over 26B tokens" in text.stdout
    assert "effective training time" in text.stdout and "MWh" in text.stdout


def test_goodput_is_reproducible_and_absent_by_default(run):
    args = ("estimate", *BASE, "--tokens", "26B", "--goodput", "--json")
    assert json.loads(run(*args).stdout)["goodput"] == json.loads(run(*args).stdout)["goodput"]
    plain = json.loads(run("estimate", *BASE, "--tokens", "26B", "--json").stdout)
    assert "goodput" not in plain


def test_goodput_needs_tokens(run):
    out = run("estimate", *BASE, "--goodput")
    assert out.returncode == 2
    assert out.stderr.strip() == "error: --goodput: needs --tokens (the run length, e.g. 15T)"


def test_validate_goodput_reproduces_the_published_figures(run):
    out = run("validate", "--goodput", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["summary"]["failed"] == 0 and report["summary"]["cases"] >= 5
    by_name = {c["name"]: c for c in report["cases"]}
    assert abs(by_name["databricks-1024-gpus-30-days"]["predicted"] - 0.57) < 0.005
    assert abs(by_name["databricks-256-gpus-30-days"]["predicted"] - 0.19) < 0.005
    assert by_name["llama3-405b-effective-training-time"]["predicted"] > 0.90
    text = run("validate", "--goodput")
    assert text.returncode == 0 and "6 of 6 cases reproduced" in text.stdout


def test_validate_goodput_fails_on_a_case_it_cannot_reproduce(run, tmp_path):
    case = {
        "name": "wrong",
        "kind": "prob_at_least_one",
        "source": "test",
        "inputs": {"gpus": 1024, "days": 30, "annual_gpu_failure_rate": 0.01},
        "published": 0.9,
        "comparison": "absolute",
        "tolerance": 0.01,
    }
    path = tmp_path / "cases.json"
    path.write_text(json.dumps({"cases": [case]}))
    out = run("validate", "--goodput", "--cases", str(path))
    assert out.returncode == 1
    assert "NOT REPRODUCED" in out.stdout


def test_search_objective_time_to_train(run):
    args = ["search", *BASE, "--global-batch", "8", "--top", "3", "--tokens", "26B", "--json"]
    ttt = run(*args, "--objective", "time-to-train")
    assert ttt.returncode == 0, ttt.stderr
    doc = json.loads(ttt.stdout)
    info = doc["time_to_train"]
    assert info["exact"] is True and len(info["goodput"]) == len(doc["plans"]) == 3
    objectives = [p["objective"] for p in doc["plans"]]
    assert objectives == sorted(objectives)
    for plan, good in zip(doc["plans"], info["goodput"]):
        assert plan["objective"] == pytest.approx(good["expected_days"] * 86400 / 26e9)
    plain = json.loads(run(*args).stdout)
    # expected wall time per token is never below the failure-free time per token
    assert objectives[0] >= plain["plans"][0]["objective"]
    text = run(*args[:-1], "--objective", "time-to-train")
    assert "ranked by expected wall-clock seconds per token for --tokens" in text.stdout
    assert "ranked by step time" not in text.stdout
    refused = run("search", *BASE, "--global-batch", "8", "--objective", "time-to-train")
    assert refused.returncode == 2 and "needs --tokens" in refused.stderr


FT_DP = ["--goodput-set", "restart.policy=ft-dp", "--goodput-set", "restart.spare_servers=0"]


def _search_json(run, *args: str) -> dict:
    out = run("search", *args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_search_cost_and_p90_objectives(run):
    args = [*BASE, "--global-batch", "8", "--top", "3", "--tokens", "26B", "--price", "2"]
    by = {o: _search_json(run, *args, "--objective", o) for o in OBJECTIVE_NAMES}
    for objective, doc in by.items():
        info = doc["time_to_train"]
        assert info["objective"] == objective and info["exact"] is True
        values = [p["objective"] for p in doc["plans"]]
        assert values == sorted(values)
        for plan, good in zip(doc["plans"], info["goodput"]):
            days = good["days_p90" if objective.endswith("p90") else "expected_days"]
            per_token = days * 86400 / 26e9
            if objective.startswith("cost"):
                per_token *= 8 * 2.0 / 3600  # GPUs x USD per GPU-hour
            assert plan["objective"] == pytest.approx(per_token, rel=1e-6)
    # at one GPU count and price, cost ranks as time does
    labels = {o: [p["plan_label"] for p in d["plans"]] for o, d in by.items()}
    assert labels["cost-to-train"] == labels["time-to-train"]
    assert labels["cost-to-train-p90"] == labels["time-to-train-p90"]


OBJECTIVE_NAMES = ("time-to-train", "time-to-train-p90", "cost-to-train", "cost-to-train-p90")


def test_more_smaller_replicas_win_under_ft_dp(run):
    # 6.7B on 64 A100s, ZeRO 0: the fastest step is TP 4 x DP 16; with fault-tolerant data
    # parallelism, no spares and 2 % GPU failures a day, TP 2 x DP 32 finishes sooner (a GPU failure
    # takes out 1/32 of the throughput instead of 1/16 until its repair)
    args = ["-m", "gpt3-6.7b", "-s", "dgx-a100-80gb", "--gpus", "64", "--global-batch", "256"]
    args += ["--top", "3", "--tokens", "100B", "--zero", "0"]
    plain = _search_json(run, *args)["plans"][0]["plan"]
    ttt = _search_json(
        run,
        *args,
        "--objective",
        "time-to-train",
        *FT_DP,
        "--goodput-set",
        "failures.gpu_failures_per_day=0.02",
    )
    best = ttt["plans"][0]["plan"]
    assert best["dp"] > plain["dp"] and best["tp"] < plain["tp"]
    recovery = ttt["time_to_train"]["goodput"][0]["recovery"]
    assert recovery["policy"] == "ft-dp" and "gpu" in recovery["absorbed"]
    assert recovery["units"] == best["dp"]


def test_estimate_grid_intensity_and_goodput_set(run):
    args = ("estimate", *BASE, "--tokens", "26B", "--goodput", "--json")
    base = json.loads(run(*args).stdout)["goodput"]
    low = json.loads(run(*args, "--grid-intensity", "43.6").stdout)["goodput"]
    assert low["emissions_tco2"] == pytest.approx(base["emissions_tco2"] / 10)
    ft = json.loads(run(*args, *FT_DP).stdout)["goodput"]
    assert ft["recovery"]["policy"] == "ft-dp" and ft["recovery"]["units"] == 8
    bad = run(*args, "--goodput-set", "restart.nope=1")
    assert bad.returncode == 2 and bad.stderr.startswith("error: --goodput-set: 'restart.nope=1'")
    refused = run(*args, "--goodput-set", "restart.policy=maybe")
    assert refused.returncode == 2 and "restart.policy" in refused.stderr


def test_sweep_goodput_columns_and_plot(run, tmp_path):
    args = ["sweep", "-m", "gpt3-1.3b", "-s", "dgx-a100-80gb", "--gpus", "8,64"]
    args += ["--global-batch", "64", "--tokens", "20B", "--goodput", "--out", str(tmp_path / "s")]
    args += ["--goodput-set", "failures.gpu_failures_per_day=0.05"]
    out = run(*args)
    assert out.returncode == 0, out.stderr
    doc = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert doc["sweep"]["goodput"]["failures"]["gpu_failures_per_day"] == 0.05
    rows = (tmp_path / "s" / "sweep.csv").read_text().splitlines()
    header = rows[0].split(",")
    for column in ("effective_training_time_ratio", "days_p50", "days_p90", "energy_mwh"):
        assert column in header
    goods = [p["goodput"] for p in doc["points"]]
    assert all(0 < g["effective_training_time_ratio"] < 1 for g in goods)
    # more GPUs: sooner, but a lower effective training time and a higher cost (badput grows)
    assert goods[1]["expected_days"] < goods[0]["expected_days"]
    assert goods[1]["effective_training_time_ratio"] < goods[0]["effective_training_time_ratio"]
    assert goods[1]["cost_usd"] > goods[0]["cost_usd"]
    assert (tmp_path / "s" / "goodput.png").stat().st_size > 0
    no_tokens = [a for a in args[:12] if a not in ("--tokens", "20B")]  # up to --goodput
    refused = run(*no_tokens, "--out", str(tmp_path / "t"))
    assert refused.returncode == 2 and "needs --tokens" in refused.stderr
