"""``paraplan estimate --goodput`` and ``paraplan validate --goodput`` end to end (issue 36)."""

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


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "paraplan", *args], capture_output=True, text=True, timeout=120
    )


def test_estimate_goodput_json_and_text():
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


def test_goodput_is_reproducible_and_absent_by_default():
    args = ("estimate", *BASE, "--tokens", "26B", "--goodput", "--json")
    assert json.loads(run(*args).stdout)["goodput"] == json.loads(run(*args).stdout)["goodput"]
    plain = json.loads(run("estimate", *BASE, "--tokens", "26B", "--json").stdout)
    assert "goodput" not in plain


def test_goodput_needs_tokens():
    out = run("estimate", *BASE, "--goodput")
    assert out.returncode == 2
    assert out.stderr.strip() == "error: --goodput: needs --tokens (the run length, e.g. 15T)"


def test_validate_goodput_reproduces_the_published_figures():
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


def test_validate_goodput_fails_on_a_case_it_cannot_reproduce(tmp_path):
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


def test_search_objective_time_to_train():
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
    refused = run("search", *BASE, "--global-batch", "8", "--objective", "time-to-train")
    assert refused.returncode == 2 and "needs --tokens" in refused.stderr
