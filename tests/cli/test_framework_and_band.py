"""--framework on estimate / search / sweep, the error band where a user decides, --objective robust (issue 8)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from paraplan import api
from paraplan.catalog import framework_names
from paraplan.cli import main
from paraplan.search import robust
from paraplan.search.run import search
from paraplan.sweep.run import SweepConfig, prepare

EST = [
    "estimate",
    "--model",
    "llama3-8b",
    "--system",
    "dgx-h100-80gb",
    "--gpus",
    "8",
    "--seq-length",
    "8192",
    "--global-batch",
    "32",
    "--recompute",
    "full",
]
SEARCH = [
    "search",
    "--model",
    "gpt3-1.3b",
    "--system",
    "dgx-a100-80gb",
    "--gpus",
    "8",
    "--global-batch",
    "32",
    "--seq-length",
    "2048",
    "--top",
    "3",
    "--micro-batch",
    "1",
    "--no-offload",
    "--default-placement",
]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return (exit_info.value.code or 0), out, err


def run_json(capsys, *argv: str) -> dict:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")


# ---- --framework -------------------------------------------------------------------------------
def test_framework_choices_come_from_the_catalog(capsys):
    for command in ("estimate", "search", "sweep"):
        code, out, _ = run(capsys, command, "--help")
        assert code == 0
        flat = " ".join(out.split()).replace("- ", "-")  # help text may wrap at a hyphen
        assert "--framework" in flat
        for name in framework_names():
            assert name in flat, (command, name)


def test_estimate_framework_matches_the_api(capsys):
    # zero 3: torchtitan's FSDP2 (at zero 1 its fp32 parameters and gradients, 8 B per unsharded parameter,
    # and its fp32 logits do not fit in 80 GB)
    data = run_json(capsys, *EST, "--framework", "torchtitan", "--zero", "3")
    expected = api.estimate(
        "llama3-8b",
        "dgx-h100-80gb",
        framework="torchtitan",
        gpus=8,
        seq_length=8192,
        global_batch=32,
        zero=3,
        recompute="full",
    )
    assert data["framework"] == "torchtitan"
    assert data["step_time_s"] == pytest.approx(expected.step_time_s, rel=1e-12)
    plain = run_json(capsys, *EST, "--zero", "3")
    assert (
        plain["framework"] is None and plain["step_time_s"] < data["step_time_s"]
    )  # FA2 + eager ops are slower


def test_profile_defaults_yield_to_explicit_options(capsys):
    old = run_json(capsys, *EST, "--framework", "megatron-lm-2021", "--zero", "1")["plan"]
    assert old["attention"] == "unfused" and old["overlap_dp_grad_reduce"] is False
    mine = run_json(
        capsys, *EST, "--framework", "megatron-lm-2021", "--zero", "1", "--attention", "flash"
    )["plan"]
    assert mine["attention"] == "flash" and mine["overlap_dp_grad_reduce"] is False


def test_unknown_framework_is_one_line(capsys):
    code, out, err = run(capsys, *EST, "--framework", "torchtitn")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [err.strip()]
    assert "--framework" in err and "did you mean torchtitan" in err


def test_search_framework_sets_attention_and_unvaried_overlaps(capsys):
    data = run_json(capsys, *SEARCH, "--framework", "megatron-lm-2021", "--default-overlap")
    assert (
        data["problem"]["framework"] == "megatron-lm-2021"
        and data["problem"]["attention"] == "unfused"
    )
    plans = [item["plan"] for item in data["plans"]]
    assert plans and all(p["attention"] == "unfused" for p in plans)
    assert any(p["dp"] > 1 for p in plans)
    # ZeRO-3 overlaps layer by layer whatever the switches say (search.space.state_options)
    assert all(
        not p["overlap_dp_grad_reduce"] for p in plans if p["dp"] * p["cp"] > 1 and p["zero"] < 3
    )


def test_sweep_applies_the_profile_to_every_system():
    config = SweepConfig(
        model="gpt3-1.3b",
        systems=("dgx-a100-80gb", "dgx-h100-80gb"),
        gpus=(8,),
        seq_length=2048,
        global_batch=32,
        framework="torchtitan",
    )
    prepared = prepare(config)
    assert all(t["settings"]["framework"] == "torchtitan" for t in prepared.tasks)
    assert all(
        t["system"]["accelerator"]["efficiency"]["attention_kernel"] == "fa2"
        for t in prepared.tasks
    )
    assert config.to_dict()["framework"] == "torchtitan"
    assert (
        "framework" not in replace(config, framework=None).to_dict()
    )  # old sweeps keep their keys


# ---- the band where a user decides ----------------------------------------------------------------
def test_search_table_json_and_explain_show_the_band(capsys):
    code, out, _ = run(capsys, *SEARCH, "--explain")
    assert code == 0
    header = next(line for line in out.splitlines() if line.startswith("#"))
    assert "band" in header.split()
    assert "band: range claimed to hold the true step time of 80 % of runs" in out
    assert "the best plan's error band" in out and "unvalidated knobs" in out
    data = run_json(capsys, *SEARCH, "--explain")
    for item in data["plans"]:
        band = item["error_band"]
        assert band["low_s"] <= item["step_time_s"] <= band["high_s"]
        assert band["validated"] == (not band["extrapolated"] and not band["prior"])
        assert band["coverage_pct"] == 80 and band["basis"]
    assert isinstance(data["explain_unvalidated"], list)


def test_top_csv_carries_the_band(capsys, tmp_path):
    import csv

    path = tmp_path / "top.csv"
    data = run_json(capsys, *SEARCH, "--csv", str(path))
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(data["plans"])
    for row, item in zip(rows, data["plans"]):
        assert float(row["band_high_pct"]) == pytest.approx(
            item["error_band"]["high_pct"], rel=1e-3
        )
        assert row["extrapolated_features"] == " | ".join(item["error_band"]["extrapolated"])


def test_estimate_text_shows_band_and_profile(capsys):
    code, out, _ = run(capsys, *EST, "--framework", "torchtitan", "--zero", "3")
    assert code == 0
    assert "framework profile: torchtitan" in out and "error band (80 % claimed): step" in out
    # the held-out torchtitan-llama3 set holds 7 groups of the torchtitan stack (all dense), fewer than the
    # 9 a band needs
    text = " ".join(out.split())
    assert "wide prior: 7 groups ran dense models on the torchtitan stack, fewer than 9" in text
    # the features are qualified by the stack (validate.features.case_population, catalog.framework_stack):
    # the torchtitan-compiled cases that recompute whole layers speak for torchtitan, nothing is extrapolated
    # (qualified by the profile's name before, "hopper dense torchtitan recompute:full" was)
    assert "extrapolated" not in out


def test_estimate_json_search_rows_and_the_api_share_one_band(capsys):
    data = run_json(capsys, *EST, "--zero", "3")
    band = api.error_band(
        "llama3-8b",
        "dgx-h100-80gb",
        gpus=8,
        seq_length=8192,
        global_batch=32,
        recompute="full",
        zero=3,
    )
    assert data["error_band"] == band.to_dict()
    assert band.low_s <= data["step_time_s"] <= band.high_s
    found = api.search("gpt3-1.3b", "dgx-a100-80gb", gpus=8, global_batch=32, top=2)
    rows = found.to_dict()["plans"]
    for record, row in zip(found.to_records(), rows):
        assert record["band_low_s"] == row["error_band"]["low_s"]
        assert record["band_high_s"] == row["error_band"]["high_s"]
        assert record["band_coverage_pct"] == 80


def test_validate_json_gives_each_case_its_held_out_band(capsys):
    data = run_json(capsys, "validate")
    timed = [c for c in data["cases"] if c["status"] == "ok" and "step_time_s" in c["measured"]]
    assert timed and all({"low_s", "high_s"} <= set(c["error_band"]) for c in timed)
    for case in timed:
        band, check = case["error_band"], case["band_check"]
        ratio = 1 / (1 + check["held_out_error_pct"] / 100)
        assert check["in_band"] == (band["low_pct"] <= 100 * (ratio - 1) <= band["high_pct"])
    coverage = data["summary"]["band_coverage"]
    assert coverage["claimed_pct"] == 80 and coverage["cases"] == len(timed)
    assert coverage["covered"] == sum(c["band_check"]["in_band"] for c in timed)
    assert set(coverage["by_group"]) == {c["group"] for c in timed}
    code, out, _ = run(capsys, "validate")
    assert code == 0 and "Error bands on held-out groups (80 % claimed)" in out


# ---- --objective robust --------------------------------------------------------------------------
def _problem(small_problem, objective: str):
    """The small search (tests/conftest.py small_problem) over micro-batches 1, 2, tp 1, 2 and pp 1."""
    return small_problem(
        objective=objective, micro_batch=(1, 2), tp=(1, 2), pp=(1,), vary_offload=False
    )


def test_robust_ranking_is_exact_against_every_feasible_plan(monkeypatch, small_problem):
    # a plan-dependent pessimistic factor that reorders the time ranking: ZeRO plans are distrusted
    monkeypatch.setattr(
        robust, "pessimistic_factor", lambda problem, plan: 1.2 if plan.zero else 1.04
    )
    result = search(_problem(small_problem, "robust"), top_k=4)
    every = search(_problem(small_problem, "time"), collect_all=True).all_feasible
    brute = sorted(item["objective"] * (1.2 if item["plan"].zero else 1.04) for item in every)
    assert [p.objective for p in result.plans] == pytest.approx(brute[:4], rel=1e-9)
    assert [p.rank for p in result.plans] == [1, 2, 3, 4] and result.robust_exact is True
    by_time = sorted(every, key=lambda i: i["objective"])[:4]  # the bands reorder the time ranking
    assert sorted(
        i["objective"] * (1.2 if i["plan"].zero else 1.04) for i in by_time
    ) != pytest.approx(brute[:4])


def test_robust_objective_is_the_pessimistic_end(capsys):
    data = run_json(capsys, *SEARCH, "--objective", "robust")
    assert data["objective"]["name"] == "robust" and data["robust_exact"] is True
    for item in data["plans"]:
        tokens = item["plan"]["global_batch"] * 2048
        assert item["objective"] == pytest.approx(item["error_band"]["high_s"] / tokens, rel=1e-9)
    assert [i["objective"] for i in data["plans"]] == sorted(i["objective"] for i in data["plans"])


def test_robust_refuses_csv_all(capsys, tmp_path):
    code, out, err = run(
        capsys, *SEARCH, "--objective", "robust", "--csv-all", str(tmp_path / "all.csv")
    )
    assert code == 2 and "--csv-all" in err and "robust" in err


def test_a_profile_file_on_a_catalog_base_gets_its_stacks_band(tmp_path, capsys):
    """Issue 31: the command passed a profile file's name to the error band, so a file with
    ``base: torchtitan`` was a stack of its own ("no validation case ran the my-titan stack"); the
    band now reads the FrameworkSpec (catalog.framework_stack walks its base chain)."""
    path = tmp_path / "my-titan.yaml"
    path.write_text("name: my-titan\nbase: torchtitan\n")
    argv = ["estimate", "-m", "gpt3-1.3b", "-s", "dgx-h100-80gb", "--gpus", "8"]
    bands = [
        run_json(capsys, *argv, "--global-batch", "8", "--framework", f)["error_band"]
        for f in ("torchtitan", str(path))
    ]
    assert "my-titan" not in bands[1]["basis"] and "torchtitan stack" in bands[1]["basis"]
    for end in ("low_pct", "high_pct"):  # the same pool's quantiles, on different step times
        assert bands[1][end] == pytest.approx(bands[0][end], rel=1e-9)
    assert bands[1]["basis"] == bands[0]["basis"]
