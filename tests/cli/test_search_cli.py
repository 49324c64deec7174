"""`paraplan search`: table, JSON, CSV, --explain and --exhaustive output; one-line errors with exit 2.

Commands run through ``paraplan.cli.main`` (the console entry point) with captured output; one
test runs the real process.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.cli import main
from paraplan.report.search_view import plan_label
from paraplan.report.search_csv import CSV_PLAN_FIELDS
from paraplan.search.run import search
from paraplan.search.space import SearchProblem
from paraplan.specs.plan import PlanSpec

BASE = [
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
]
SMALL = [
    "--tp",
    "1,2",
    "--micro-batch",
    "1",
    "--no-offload",
    "--default-placement",
    "--recompute",
    "none",
]
# a space where part of the candidates do not fit (for the CSV)
CSV_ARGS = [
    "search",
    "--model",
    "gpt3-13b",
    "--system",
    "dgx-a100-40gb",
    "--gpus",
    "8",
    "--global-batch",
    "16",
    "--seq-length",
    "2048",
    "--micro-batch",
    "1,2",
    "--recompute",
    "none,full",
    "--default-placement",
    "--default-overlap",
]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``paraplan *argv``."""
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    code = exit_info.value.code
    return (0 if code is None else code), out, err


def run_json(capsys, *argv: str, expect: int = 0) -> dict:
    code, out, err = run(capsys, *argv, "--json")
    assert code == expect, err
    return json.loads(out)


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    """Wide enough that rich keeps every table cell on one line."""
    monkeypatch.setenv("COLUMNS", "250")


# ---- table and JSON --------------------------------------------------------------------------
def test_search_prints_table_and_summary(capsys):
    code, out, err = run(capsys, *BASE)
    assert code == 0, err
    assert err == ""
    lines = out.splitlines()
    assert lines[0].startswith("gpt3-1.3b on 8 x dgx-a100-80gb, seq 2048, global batch 32")
    assert "objective time" in lines[0]
    assert "Fastest plans that fit" in out
    for header in ("plan", "global batch", "step s", "tokens/s", "MFU", "peak GiB"):
        assert header in out, header
    ranked = [line for line in lines if line.split() and line.split()[0] in {"1", "2", "3", "4"}]
    assert [line.split()[0] for line in ranked] == ["1", "2", "3"]
    data = run_json(capsys, *BASE)
    best = PlanSpec.model_validate(data["plans"][0]["plan"])
    assert plan_label(best) in ranked[0]
    summary = lines[-1]
    assert "candidate plans" in summary and "evaluated" in summary and "of those fit" in summary
    assert f"{data['candidates']:,} candidate plans" in summary
    assert summary.rstrip().endswith(" s")


def test_search_json(capsys):
    data = run_json(capsys, *BASE)
    for key in (
        "problem",
        "objective",
        "plans",
        "candidates",
        "evaluated",
        "feasible",
        "rows",
        "rows_evaluated",
        "nearest_miss",
        "timing",
    ):
        assert key in data, key
    assert "seconds" not in data  # wall-clock time is kept apart, under "timing"
    assert set(data["timing"]) == {"search_s"} and data["timing"]["search_s"] >= 0
    assert data["problem"] == {
        "model": "gpt3-1.3b",
        "system": "dgx-a100-80gb",
        "gpus": 8,
        "seq_length": 2048,
        "global_batch": 32,
        "max_global_batch": None,
        "dtype": "bf16",
        "attention": "flash",
        "objective": "time",
        "framework": None,
        "price_per_gpu_hour": 1.8,
        "tokens": None,
        "restrictions": data["problem"]["restrictions"],
        "memory_headroom": 0.05,  # the default share of HBM kept free (search.headroom)
    }
    assert (
        data["problem"]["restrictions"]["tp"] is None
        and data["problem"]["restrictions"]["vary_offload"] is True
    )
    assert data["objective"] == {
        "name": "time",
        "unit": "s/token",
        "better": "lower",
        "meaning": data["objective"]["meaning"],
    }
    assert isinstance(data["evaluated"], int) and isinstance(data["feasible"], int)
    assert data["candidates"] >= data["evaluated"] >= data["feasible"] > 0
    assert data["nearest_miss"] is None
    assert len(data["plans"]) == 3
    assert [p["rank"] for p in data["plans"]] == [1, 2, 3]
    for item in data["plans"]:
        for key in (
            "plan",
            "plan_label",
            "step_time_s",
            "tokens_per_s",
            "mfu",
            "peak_memory_gib",
            "objective",
            "breakdown",
            "cost_usd_per_step",
            "cost_usd_per_million_tokens",
            "error_band",
        ):
            assert key in item, key
        plan = PlanSpec.model_validate(item["plan"])
        assert item["plan_label"] == plan_label(plan)
        assert math.isclose(
            item["objective"], item["step_time_s"] / (32 * 2048), rel_tol=1e-9
        )  # s/token
        assert math.isclose(
            item["cost_usd_per_step"], item["step_time_s"] * 8 * 1.8 / 3600, rel_tol=1e-9
        )
        assert math.isclose(
            item["cost_usd_per_million_tokens"],
            item["cost_usd_per_step"] / (32 * 2048) * 1e6,
            rel_tol=1e-9,
        )
        assert plan.gpus == 8 and plan.global_batch == 32 and plan.seq_length == 2048
        assert math.isclose(item["tokens_per_s"], 32 * 2048 / item["step_time_s"], rel_tol=1e-9)
        assert 0 < item["mfu"] < 1
        assert 0 < item["peak_memory_gib"] <= 80
    times = [item["step_time_s"] for item in data["plans"]]
    assert times == sorted(times)
    # the CLI answer is the library's answer
    problem = SearchProblem(
        model=load_model("gpt3-1.3b"),
        system=load_system("dgx-a100-80gb"),
        gpus=8,
        global_batch=32,
        seq_length=2048,
        price_per_gpu_hour=load_system("dgx-a100-80gb").price_per_gpu_hour,
    )
    result = search(problem, top_k=3)
    assert [item["plan"] for item in data["plans"]] == [r.plan.model_dump() for r in result.plans]
    assert data["candidates"] == result.candidates


def test_top_limits_plans(capsys):
    data = run_json(capsys, *BASE[:-1], "1")
    assert len(data["plans"]) == 1


@pytest.mark.parametrize("objective", ["cost", "mfu"])
def test_objectives_rank_like_time_at_a_fixed_batch(capsys, objective):
    """At a fixed global batch every objective is a positive multiple of seconds per token (or
    minus its inverse), so the top plans are the time objective's."""
    by_time = run_json(capsys, *BASE)
    other = run_json(capsys, *BASE, "--objective", objective)
    assert [p["plan"] for p in other["plans"]] == [p["plan"] for p in by_time["plans"]]
    code, out, _ = run(capsys, *BASE, "--objective", objective)
    assert code == 0 and f"objective {objective}" in out.splitlines()[0]


def test_cost_objective_shows_cost_title_columns_and_units(capsys):
    code, out, err = run(capsys, *BASE, "--objective", "cost", "--price", "2", "--tokens", "300B")
    assert code == 0, err
    assert "Cheapest plans that fit (ranked by USD per token at $2.00/GPU-hour)" in out
    header = next(line for line in out.splitlines() if line.startswith("#"))
    for column in ("$/step", "$/M tokens", "run days", "run $"):
        assert column in header, column
    data = run_json(capsys, *BASE, "--objective", "cost", "--price", "2", "--tokens", "300B")
    assert data["objective"]["unit"] == "USD/token" and data["problem"]["price_per_gpu_hour"] == 2
    assert data["problem"]["tokens"] == 300e9
    best = data["plans"][0]
    assert math.isclose(best["objective"], best["cost_usd_per_step"] / (32 * 2048), rel_tol=1e-9)
    assert math.isclose(
        best["run"]["cost_usd"], 300e9 / (32 * 2048) * best["cost_usd_per_step"], rel_tol=1e-9
    )
    row = next(line for line in out.splitlines() if line.startswith("1 "))
    assert f"{best['cost_usd_per_step']:.4g}" in row and f"{best['run']['cost_usd']:,.0f}" in row


def test_mfu_objective_title_and_unit(capsys):
    code, out, _ = run(capsys, *BASE, "--objective", "mfu")
    assert code == 0 and "Plans with the highest MFU that fit (ranked by MFU)" in out
    data = run_json(capsys, *BASE, "--objective", "mfu")
    assert data["objective"]["unit"] == "-MFU (fraction)"
    assert all(math.isclose(p["objective"], -p["mfu"], rel_tol=1e-9) for p in data["plans"])


def test_cost_objective_without_a_price_is_an_input_error(capsys, tmp_path):
    data = load_system("dgx-a100-80gb").model_dump(exclude={"price_per_gpu_hour"})
    path = tmp_path / "noprice.json"
    path.write_text(json.dumps(data))
    code, out, err = run(
        capsys,
        "search",
        "--model",
        "gpt3-1.3b",
        "--system",
        str(path),
        "--gpus",
        "8",
        "--global-batch",
        "32",
        "--objective",
        "cost",
    )
    assert code == 2 and out == ""
    assert err.startswith("error: --price:") and err.count("\n") == 1


# ---- CSV ---------------------------------------------------------------------------------------
def test_csv_writes_the_rows_shown(capsys, tmp_path):
    path = tmp_path / "top.csv"
    data = run_json(capsys, *BASE, "--csv", str(path))
    with path.open(newline="") as handle:
        table = list(csv.reader(handle))
    header, rows = table[0], table[1:]
    assert (
        header[:2] == ["rank", "plan_label"] and "step_time_s" in header and "forward_s" in header
    )
    assert len(rows) == len(data["plans"]) == data["csv_rows"] == 3
    assert [r[1] for r in rows] == [p["plan_label"] for p in data["plans"]]
    for row, item in zip(rows, data["plans"]):
        assert math.isclose(
            float(row[header.index("step_time_s")]), item["step_time_s"], rel_tol=1e-5
        )
    assert "csv_all_rows" not in data
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically, no temporary file left
    code, out, _ = run(capsys, *BASE, "--csv", str(path))
    assert code == 0 and f"wrote the 3 plans shown to {path}" in out


def test_csv_all_has_one_row_per_feasible_plan(capsys, tmp_path):
    path = tmp_path / "plans.csv"
    data = run_json(capsys, *CSV_ARGS, "--csv-all", str(path))
    with path.open(newline="") as handle:
        table = list(csv.reader(handle))
    header, rows = table[0], table[1:]
    assert header == [
        *CSV_PLAN_FIELDS,
        "step_time_s",
        "tokens_per_s",
        "objective",
        "peak_memory_gib",
    ]
    # with --csv-all the search evaluates the whole space: rows = every feasible candidate
    assert data["evaluated"] == data["candidates"]
    assert len(rows) == data["feasible"] == data["csv_all_rows"]
    assert 0 < len(rows) < data["candidates"]  # some candidates do not fit and are not written
    from paraplan.search.headroom import DEFAULT_MEMORY_HEADROOM, with_headroom

    problem = SearchProblem(  # the CLI keeps --memory-headroom of HBM free
        model=load_model("gpt3-13b"),
        system=with_headroom(load_system("dgx-a100-40gb"), DEFAULT_MEMORY_HEADROOM),
        gpus=8,
        global_batch=16,
        seq_length=2048,
        micro_batch=(1, 2),
        recompute=("none", "full"),
        vary_placement=False,
        vary_overlap=False,
    )
    full = search(problem, top_k=1, collect_all=True)
    assert len(rows) == full.feasible == len(full.all_feasible)
    assert all(len(row) == len(header) for row in rows)
    # rows stream out batch by batch in evaluation order (the file can hold tens of millions);
    # the best row by objective is the search's best plan
    objectives = [float(row[header.index("objective")]) for row in rows]
    peaks = [float(row[header.index("peak_memory_gib")]) for row in rows]
    assert max(peaks) <= 40 * (1 - DEFAULT_MEMORY_HEADROOM)
    first = dict(zip(header, rows[objectives.index(min(objectives))]))
    best = data["plans"][0]["plan"]
    for key in ("tp", "pp", "cp", "dp", "micro_batch", "global_batch", "zero"):
        assert int(first[key]) == best[key], key
    assert first["recompute"] == best["recompute"]
    assert math.isclose(float(first["step_time_s"]), data["plans"][0]["step_time_s"], rel_tol=1e-5)


def test_csv_all_text_output_says_how_many_rows(capsys, tmp_path):
    path = tmp_path / "plans.csv"
    code, out, err = run(capsys, *BASE, *SMALL, "--csv-all", str(path))
    assert code == 0, err
    with path.open(newline="") as handle:
        rows = len(list(csv.reader(handle))) - 1
    assert f"wrote every feasible plan, {rows:,} rows, to {path}" in out


@pytest.mark.parametrize("flag", ["--csv", "--csv-all"])
def test_csv_unwritable_path_is_an_input_error(capsys, tmp_path, flag):
    code, out, err = run(capsys, *BASE, *SMALL, flag, str(tmp_path / "missing" / "plans.csv"))
    assert code == 2
    assert err.startswith(f"error: {flag}:") and err.count("\n") == 1


_EXHAUSTIVE: dict = {}


def exhaustive_run(capsys, tmp_path_factory) -> tuple[dict, list[list[str]]]:
    """JSON and CSV rows of ONE ``--exhaustive --json --csv-all`` run, shared by the two tests that
    read it (the exhaustive path estimates every candidate; both tests are in one xdist group)."""
    if not _EXHAUSTIVE:
        path = tmp_path_factory.mktemp("exhaustive") / "plans.csv"
        data = run_json(capsys, *BASE, *SMALL, "--exhaustive", "--csv-all", str(path))
        with path.open(newline="") as handle:
            _EXHAUSTIVE.update(data=data, rows=list(csv.reader(handle))[1:])
    return _EXHAUSTIVE["data"], _EXHAUSTIVE["rows"]


@pytest.mark.xdist_group("search-cli-exhaustive")
def test_csv_with_exhaustive_writes_the_feasible_plans(capsys, tmp_path_factory):
    data, rows = exhaustive_run(capsys, tmp_path_factory)
    assert data["feasible"] > 0
    assert len(rows) == data["feasible"]


# ---- explain and exhaustive --------------------------------------------------------------------
def test_explain_table(capsys):
    code, out, err = run(capsys, *BASE, "--explain")
    assert code == 0, err
    assert "Why the best plan wins" in out
    table = out[out.index("Why the best plan wins") :]
    for knob in ("tp", "pp", "micro_batch", "recompute", "zero", "offload_weights"):
        assert f"\n{knob} " in table, knob
    assert "slower" in table
    data = run_json(capsys, *BASE, "--explain")
    verdicts = {a["verdict"] for a in data["explain"]}
    assert verdicts <= {"slower", "does not fit", "invalid", "equal", "faster"}
    assert "faster" not in verdicts
    for alternative in data["explain"]:
        assert set(alternative) >= {"knob", "change", "verdict", "step_time_s", "delta_s", "reason"}


@pytest.mark.xdist_group("search-cli-exhaustive")
def test_exhaustive_matches_the_fast_path(capsys, tmp_path_factory):
    fast = run_json(capsys, *BASE, *SMALL)
    slow, _ = exhaustive_run(capsys, tmp_path_factory)
    assert slow["plans"][0]["plan"] == fast["plans"][0]["plan"]
    assert [p["plan"] for p in slow["plans"]] == [p["plan"] for p in fast["plans"]]
    for a, b in zip(slow["plans"], fast["plans"]):
        assert math.isclose(a["step_time_s"], b["step_time_s"], rel_tol=1e-9)
    assert slow["candidates"] == fast["candidates"] == slow["evaluated"]
    assert slow["feasible"] == fast["feasible"]  # nothing pruned on this problem: same counts
    # the table of an exhaustive search (a smaller space: the title, not the ranking, is checked here)
    code, out, err = run(
        capsys,
        *BASE,
        "--tp",
        "1",
        "--micro-batch",
        "1",
        "--no-offload",
        "--default-placement",
        "--recompute",
        "none",
        "--default-overlap",
        "--exhaustive",
    )
    assert code == 0, err
    assert "Fastest plans that fit" in out


# ---- no feasible plan ----------------------------------------------------------------------------
NOTHING_FITS = [
    "search",
    "--model",
    "llama3-405b",
    "--system",
    "dgx-a100-40gb",
    "--gpus",
    "8",
    "--global-batch",
    "8",
    "--no-offload",
]


def test_no_feasible_plan_prints_the_nearest_miss_and_exits_1(capsys):
    code, out, err = run(capsys, *NOTHING_FITS)
    assert code == 1 and err == ""
    assert "Fastest plans that fit" not in out
    assert "Nearest miss" in out
    assert "GiB" in out and "over by" in out
    assert "0 of those fit" in out
    assert "allowing offload (without --no-offload)" in out and "more GPUs" in out
    data = run_json(capsys, *NOTHING_FITS, expect=1)
    assert data["plans"] == [] and data["feasible"] == 0
    assert data["nearest_miss"]["overflow_gib"] > 0
    PlanSpec.model_validate(data["nearest_miss"]["plan"])


def test_no_feasible_plan_with_explain_exits_1(capsys):
    code, out, err = run(capsys, *NOTHING_FITS, "--explain")
    assert code == 1, err
    assert "Nearest miss" in out and "Why the best plan wins" not in out


# ---- bad input: one stderr line, exit 2 ----------------------------------------------------------
GOOD = ["search", "--model", "gpt3-1.3b", "--system", "dgx-a100-80gb"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--gpus", "0", "--global-batch", "32"], "--gpus"),
        (["--gpus", "-8", "--global-batch", "32"], "--gpus"),
        (["--gpus", "abc", "--global-batch", "32"], "--gpus"),
        (["--gpus", "8", "--global-batch", "32", "--objective", "speed"], "objective"),
        (["--gpus", "8", "--global-batch", "32", "--max-global-batch", "64"], "global"),
        (["--gpus", "8"], "global"),
        (["--gpus", "8", "--global-batch", "32", "--tp", "1,x"], "--tp"),
        (["--gpus", "8", "--global-batch", "32", "--micro-batch", "-1"], "--micro-batch"),
        (["--gpus", "8", "--global-batch", "32", "--recompute", "some"], "--recompute"),
        (["--gpus", "8", "--global-batch", "32", "--schedule", "zigzag"], "--schedule"),
        (["--gpus", "8", "--global-batch", "0"], "global_batch"),
        (["--gpus", "8", "--global-batch", "32", "--top", "0"], "--top"),
        (["--gpus", "8", "--global-batch", "32", "--model", "gpt-nonexistent"], "model"),
        (["--gpus", "8", "--global-batch", "32", "--system", "nope"], "system"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else v,
)
def test_bad_input_is_one_line_exit_2(capsys, argv, expected):
    code, out, err = run(capsys, *GOOD, *argv)
    assert code == 2
    assert out == ""
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert expected in err


@pytest.mark.parametrize("flag", ["--global-batch", "--max-global-batch"])
def test_batch_below_minimum_dp_is_an_input_error(capsys, flag):
    """gpt3-125m (12 heads, 12 layers) on 125 GPUs: every split has dp >= 25."""
    code, out, err = run(
        capsys,
        "search",
        "--model",
        "gpt3-125m",
        "--system",
        "dgx-a100-80gb",
        "--gpus",
        "125",
        flag,
        "16",
    )
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("error: " + flag.lstrip("-").replace("-", "_"))
    assert "minimum data-parallel degree" in err


def test_batch_not_divisible_by_any_dp_is_an_input_error(capsys):
    code, out, err = run(
        capsys,
        "search",
        "--model",
        "gpt3-125m",
        "--system",
        "dgx-a100-80gb",
        "--gpus",
        "125",
        "--global-batch",
        "64",
    )
    assert code == 2
    assert "global_batch" in err


def test_console_script_process():
    ok = subprocess.run(
        [sys.executable, "-m", "paraplan.cli", *BASE, *SMALL, "--json"],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["plans"]
    bad = subprocess.run(
        [sys.executable, "-m", "paraplan.cli", *GOOD, "--gpus", "abc", "--global-batch", "8"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert len(bad.stderr.splitlines()) == 1 and "--gpus" in bad.stderr


# ---- ties and equivalent plans -------------------------------------------------------------------
GROUPED = [
    "search",
    "--model",
    "llama3-8b",
    "--system",
    "dgx-h100-80gb",
    "--gpus",
    "64",
    "--global-batch",
    "64",
    "--seq-length",
    "8192",
    "--tp",
    "4",
    "--cp",
    "2,4",
    "--pp",
    "1",
    "--micro-batch",
    "1,2",
    "--recompute",
    "none",
    "--zero",
    "2",
    "--no-offload",
    "--default-overlap",
    "--top",
    "12",
]


def test_equivalent_plans_share_one_row_that_names_them(capsys, tmp_path):
    data = run_json(capsys, *GROUPED)
    grouped = [p for p in data["plans"] if p["equivalent_plan_labels"]]
    assert grouped and len(data["plans"]) == 12  # 12 different choices, some standing for two plans
    for item in grouped:
        assert [PlanSpec.model_validate(q) for q in item["equivalent_plans"]]
        assert all(label.endswith("tp-dp-cp-pp") for label in item["equivalent_plan_labels"])
    code, out, _ = run(capsys, *GROUPED)
    assert code == 0
    first = grouped[0]
    row = next(line for line in out.splitlines() if line.startswith(f"{first['rank']} "))
    assert f"{first['plan_label']} (same time and memory: tp-dp-cp-pp)" in row
    path = tmp_path / "top.csv"
    run_json(capsys, *GROUPED, "--csv", str(path))
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows[first["rank"] - 1]["equivalent_plans"] == first["equivalent_plan_labels"][0]


def test_equal_step_times_list_the_lower_memory_plan_first(capsys):
    data = run_json(capsys, *BASE[:-1], "10")
    plans = data["plans"]
    ties = [
        (a, b)
        for a, b in zip(plans, plans[1:])
        if math.isclose(a["objective"], b["objective"], rel_tol=1e-12)
    ]
    assert ties
    for a, b in ties:
        assert a["peak_memory_gib"] <= b["peak_memory_gib"]
