"""`paraplan estimate | models | systems | validate`: output shapes, and one-line errors with exit 2.

The commands are run through ``paraplan.cli.main`` (the console entry point, which turns every
input error into one stderr line) with captured output; one test runs the real process.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from paraplan.catalog import model_names, system_names
from paraplan.cli import main

BASE = ["estimate", "--model", "llama3-8b", "--system", "dgx-h100-80gb", "--gpus", "8"]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``paraplan *argv``."""
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    code = exit_info.value.code
    return (0 if code is None else code), out, err


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    """Wide enough that rich keeps every table cell on one line."""
    monkeypatch.setenv("COLUMNS", "200")


# ---- estimate --------------------------------------------------------------------------------
def test_estimate_prints_tables(capsys):
    code, out, err = run(capsys, *BASE, "--zero", "1")
    assert code == 0, err
    assert out.startswith("plan: llama3-8b (8.03B parameters) on dgx-h100-80gb")
    for text in (
        "Key metrics",
        "step time (s)",
        "tokens / s",
        "MFU",
        "HFU",
        "model TFLOP/s per GPU",
        "Time per step",
        "forward",
        "pipeline bubble",
        "DP comm (exposed)",
        "Memory per GPU",
        "optim.",
        "activ.",
        "reserved",
        "capacity",
        "0 *",
    ):
        assert text in out, text
    assert "fits: peak" in out
    assert "DOES NOT FIT" not in out


def test_estimate_json_keys(capsys):
    code, out, _ = run(capsys, *BASE, "--zero", "1", "--json")
    assert code == 0
    data = json.loads(out)
    for key in (
        "step_time_s",
        "tokens_per_s",
        "mfu",
        "hfu",
        "model_tflops_per_gpu",
        "memory",
        "breakdown",
        "plan",
    ):
        assert key in data, key
    for key in ("weights_and_optimizer_gib", "activations_gib", "peak_gib", "fits", "per_stage"):
        assert key in data["memory"], key
    assert (
        data["plan"]["dp"] == 8
        and data["plan"]["global_batch"] == 8
        and data["plan"]["seq_length"] == 2048
    )
    assert data["memory"]["fits"] is True
    assert abs(sum(data["breakdown"].values()) - data["step_time_s"]) < 1e-9 * data["step_time_s"]
    assert 0 < data["mfu"] <= data["hfu"] < 1
    assert "ops" not in data and "run" not in data


def test_estimate_plan_flags_reach_the_plan(capsys):
    code, out, err = run(
        capsys,
        "estimate",
        "--model",
        "llama3-70b",
        "--system",
        "dgx-h100-80gb",
        "--gpus",
        "64",
        "--tp",
        "4",
        "--pp",
        "4",
        "--cp",
        "2",
        "--vpp",
        "5",
        "--micro-batch",
        "1",
        "--seq-length",
        "8192",
        "--sequence-parallel",
        "--recompute",
        "selective",
        "--zero",
        "1",
        "--dtype",
        "fp8",
        "--attention",
        "flash",
        "--no-overlap-dp",
        "--no-overlap-param-gather",
        "--overlap-tp-comm",
        "--placement",
        "tp-cp-dp-pp",
        "--json",
    )
    assert code == 0, err
    plan = json.loads(out)["plan"]
    assert (plan["tp"], plan["pp"], plan["cp"], plan["dp"], plan["vpp"]) == (4, 4, 2, 2, 5)
    assert (
        plan["global_batch"] == 2 * 1 * 4
    )  # default: dp·micro_batch·pp for the interleaved schedule
    assert plan["sequence_parallel"] and plan["recompute"] == "selective" and plan["dtype"] == "fp8"
    assert (
        not plan["overlap_dp_grad_reduce"]
        and not plan["overlap_param_gather"]
        and plan["overlap_tp_comm"]
    )


def test_estimate_ops(capsys):
    code, out, _ = run(capsys, *BASE, "--zero", "1", "--ops")
    assert code == 0
    assert (
        "Ops per micro-batch per GPU" in out and "qkv_projection" in out and "GEMM b×m×n×k" in out
    )
    code, out, _ = run(capsys, *BASE, "--zero", "1", "--ops", "--json")
    data = json.loads(out)
    assert data["ops"] and {
        "block",
        "name",
        "kind",
        "gemm_shape",
        "fwd_flops",
        "efficiency",
    } <= set(data["ops"][0])
    assert "communication" in data


def test_estimate_ops_lists_collectives(capsys):
    code, out, _ = run(capsys, *BASE, "--tp", "8", "--ops")
    assert code == 0
    assert "Collectives per micro-batch per GPU" in out and "domains" in out


def test_run_totals(capsys):
    code, out, _ = run(capsys, *BASE, "--zero", "1", "--json", "--tokens", "1e12", "--price", "3")
    assert code == 0
    data = json.loads(out)
    run_ = data["run"]
    assert run_["tokens"] == 1e12 and run_["price_per_gpu_hour"] == 3
    steps = 1e12 / (8 * 2048)
    assert run_["steps"] == pytest.approx(steps)
    assert run_["gpu_hours"] == pytest.approx(steps * data["step_time_s"] / 3600 * 8)
    assert run_["days"] == pytest.approx(steps * data["step_time_s"] / 86400)
    assert run_["cost_usd"] == pytest.approx(run_["gpu_hours"] * 3)
    # price defaults to the system's, tokens accept a suffix, and the table shows the totals
    code, out, _ = run(capsys, *BASE, "--zero", "1", "--json", "--tokens", "1T")
    assert json.loads(out)["run"]["price_per_gpu_hour"] == 2.5
    code, out, _ = run(capsys, *BASE, "--zero", "1", "--tokens", "1T")
    assert "Run of 1.00T tokens" in out and "GPU-hours" in out and "cost (USD)" in out


def test_plan_that_does_not_fit_prints_exits_1_and_says_what_would_fit(capsys):
    code, out, err = run(capsys, *BASE)  # ZeRO 0: 16 B/param of an 8B model do not fit 80 GiB
    assert code == 1 and err == ""
    assert "DOES NOT FIT: stage 0 needs" in out and "80.00 GiB" in out
    assert "NO" in out and "step time (s)" in out
    hints = out[out.index("would fit with one change") :].splitlines()[1:]
    assert hints and all(line.startswith("  --") for line in hints)
    assert any(
        line.startswith("  --zero 1: peak") for line in hints
    )  # the distributed optimizer fits
    # every hint is true: the plan with that one change fits
    flags = [line.split(":")[0].split() for line in hints]
    for flag in flags:
        code, _, _ = run(capsys, *BASE, *flag, "--json")
        assert code == 0, flag
    code, out, _ = run(capsys, *BASE, "--json")
    assert code == 1
    data = json.loads(out)
    assert data["memory"]["fits"] is False and data["fit_hints"][0].startswith("would fit")


def test_plan_that_no_single_change_fits_names_the_search_plan(capsys):
    """llama3-70b on 8 x 40 GB: no one change is enough; the search's fastest fitting plan is named."""
    argv = [
        "estimate",
        "--model",
        "llama3-70b",
        "--system",
        "dgx-a100-40gb",
        "--gpus",
        "8",
        "--global-batch",
        "8",
    ]
    code, out, _ = run(capsys, *argv)
    assert code == 1
    tail = out[out.rindex("DOES NOT FIT") :]
    assert "no single change fits" in tail
    assert (
        "paraplan search --model llama3-70b --system dgx-a100-40gb --gpus 8 --global-batch 8"
        in tail
    )


def test_model_from_hf_config_json(capsys, tmp_path):
    config = {
        "model_type": "llama",
        "num_hidden_layers": 4,
        "hidden_size": 1024,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "intermediate_size": 4096,
        "vocab_size": 32000,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, out, err = run(
        capsys,
        "estimate",
        "--model",
        str(path),
        "--system",
        "dgx-h100-80gb",
        "--gpus",
        "1",
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)["model"] == tmp_path.name  # a config.json is named after its directory


# ---- catalogs --------------------------------------------------------------------------------
def test_models_listing(capsys):
    code, out, _ = run(capsys, "models")
    assert code == 0
    for name in model_names():
        assert name in out
    code, out, _ = run(capsys, "models", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert set(rows) == set(model_names())
    assert rows["llama3-8b"]["params_b"] == pytest.approx(8.03, abs=0.01)
    assert rows["llama3-70b"]["params_b"] == pytest.approx(70.55, abs=0.02)


def test_systems_listing(capsys):
    code, out, _ = run(capsys, "systems")
    assert code == 0
    for name in system_names():
        assert name in out
    code, out, _ = run(capsys, "systems", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert set(rows) == set(system_names())
    h100 = rows["dgx-h100-80gb"]
    assert h100["hbm_gib"] == pytest.approx(80) and h100["domain_size"] == 8
    assert h100["peak_bf16_tflops"] == pytest.approx(989.4)


# ---- errors: one stderr line naming the field, exit 2 ------------------------------------------
def _bad_unit_system(tmp_path) -> str:
    path = tmp_path / "bad-system.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "bad",
                "accelerator": {
                    "name": "X",
                    "matrix_flops": {"bf16": "989 TFLOPS"},
                    "vector_flops": {"bf16": "134 TFLOPS"},
                    "hbm_capacity": "80 GiBB",
                    "hbm_bandwidth": "3.35 TB/s",
                    "sm_count": 132,
                },
                "node": {"gpus_per_domain": 8, "nvlink_bandwidth": "450 GB/s"},
                "network": {"nic_bandwidth": "400 Gb/s"},
            }
        )
    )
    return str(path)


ESTIMATE = ["estimate", "--model", "llama3-8b", "--system", "dgx-h100-80gb"]
ERROR_CASES = {
    "unknown model": (
        ["estimate", "--model", "llama3-8", "--system", "dgx-h100-80gb", "--gpus", "8"],
        ["model", "llama3-8", "did you mean", "llama3-8b"],
    ),
    "unknown system": (
        ["estimate", "--model", "llama3-8b", "--system", "dgx-h1000", "--gpus", "8"],
        ["system", "dgx-h1000", "did you mean"],
    ),
    "tp does not divide heads": ([*ESTIMATE, "--gpus", "6", "--tp", "3"], ["plan.tp", "heads=32"]),
    "global batch vs dp·micro_batch": (
        [*ESTIMATE, "--gpus", "8", "--global-batch", "12"],
        ["plan.global_batch", "12", "dp·micro_batch"],
    ),
    "tp does not divide gpus": (
        [*ESTIMATE, "--gpus", "6", "--tp", "4"],
        ["plan.tp", "must divide gpus=6"],
    ),
    "bogus recompute": (
        [*ESTIMATE, "--gpus", "8", "--recompute", "bogus"],
        ["--recompute", "bogus", "none", "selective", "full"],
    ),
    "non-positive gpus": ([*ESTIMATE, "--gpus", "0"], ["--gpus"]),
    "negative tp": ([*ESTIMATE, "--gpus", "8", "--tp", "-2"], ["--tp"]),
    "zero out of range": ([*ESTIMATE, "--gpus", "8", "--zero", "4"], ["--zero"]),
    "unknown dtype": ([*ESTIMATE, "--gpus", "8", "--dtype", "fp4"], ["--dtype", "fp4", "bf16"]),
    "dtype the GPU lacks": (
        [
            "estimate",
            "--model",
            "llama3-8b",
            "--system",
            "dgx-a100-80gb",
            "--gpus",
            "8",
            "--dtype",
            "fp8",
        ],
        ["plan.dtype", "fp8"],
    ),
    "bad placement": ([*ESTIMATE, "--gpus", "8", "--placement", "tp-dp"], ["placement", "tp-dp"]),
    "bad tokens": ([*ESTIMATE, "--gpus", "8", "--tokens", "lots"], ["--tokens", "lots"]),
    "missing option": (["estimate", "--model", "llama3-8b", "--gpus", "8"], ["--system"]),
    "missing model file": (
        ["estimate", "--model", "nowhere.yaml", "--system", "dgx-h100-80gb", "--gpus", "8"],
        ["model", "nowhere.yaml"],
    ),
    "unknown command": (["estimat"], ["estimat"]),
}


@pytest.mark.parametrize("argv, expected", list(ERROR_CASES.values()), ids=list(ERROR_CASES))
def test_bad_input_is_one_line_exit_2(capsys, argv, expected):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    for text in expected:
        assert text in lines[0], (text, lines[0])
    assert "Traceback" not in err


def test_unknown_unit_in_system_file(capsys, tmp_path):
    code, out, err = run(
        capsys,
        "estimate",
        "--model",
        "llama3-8b",
        "--system",
        _bad_unit_system(tmp_path),
        "--gpus",
        "8",
    )
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "hbm_capacity" in lines[0] and "GiBB" in lines[0] and "GiB" in lines[0]


def test_console_script_process(tmp_path):
    """The real process: a bad flag is one stderr line with exit 2; a good run exits 0."""
    proc = subprocess.run(
        [sys.executable, "-m", "paraplan.cli", *BASE, "--recompute", "bogus"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "--recompute" in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "paraplan.cli", *BASE, "--zero", "1", "--json"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and "step_time_s" in json.loads(proc.stdout)
    proc = subprocess.run(
        [sys.executable, "-m", "paraplan.cli", *BASE, "--json"], capture_output=True, text=True
    )
    assert (
        proc.returncode == 1 and json.loads(proc.stdout)["memory"]["fits"] is False
    )  # does not fit: exit 1


# ---- validate --------------------------------------------------------------------------------
def test_validate_json_format(capsys):
    code, out, _ = run(capsys, "validate", "--json")
    assert code == 0
    report = json.loads(out)
    assert set(report) == {"cases", "summary"}
    assert report["cases"]
    for case in report["cases"]:
        # the cases with a step time get their held-out band (validate.coverage)
        timed = "step_time_s" in case["measured"]
        assert set(case) == {
            "name",
            "source",
            "group",
            "role",
            "status",
            "scope",
            "framework",
            "predicted",
            "measured",
            "error_pct",
        } | ({"error_band", "band_check"} if timed else set())
        assert case["scope"] in ("transformer_layers", "stage")
        assert {
            "step_time_s",
            "weights_and_optimizer_gib",
            "activations_gib",
            "peak_memory_gib",
            "fits",
            "mfu",
            "stage_weights_and_optimizer_gib",
            "stage_activations_gib",
        } <= set(case["predicted"])
        assert set(case["error_pct"]) == set(case["measured"])
        for metric, measured in case["measured"].items():
            expected = 100 * (case["predicted"][metric] / measured - 1)
            assert case["error_pct"][metric] == pytest.approx(expected)
    summary = report["summary"]
    for key in (
        "step_time_s_mape_pct",
        "weights_and_optimizer_gib_mape_pct",
        "activations_gib_mape_pct",
        "max_abs_error_pct",
        "by_source",
    ):
        assert key in summary, key
    assert set(summary["by_source"]) == {
        "gpu-steps-2026-11",
        "hf-steps-2026-11",
        "tiny-steps-2026-11",
        "tiny-steps-2026-11-host2",
        "korthikanti2022",
        "nemo-llama31-h100",
        "mbridge-dense",
        "moe-visible",
        "narayanan2021",
        *("llmfoundry-mpt", "torchtitan-llama3", "bloom-megatron-deepspeed", "maxtext-gpu"),
        "megatron-v1-v100",
        "consumer-gpus",
        *("mbridge-gb300", "mbridge-dense-more", "alps-gh200", "gcp-gpu-recipes"),
        "dsexamples-hf-v100",
        "mbridge-moe-gb",
        "bigscience-tr11-prequel",
        "mbridge-nvfp4",
        "mbridge-moe-more",
        *("mbridge-2604", "mbridge-260201", "mbridge-2608", "mbridge-moe-b300", "mbridge-260601"),
        # Megatron-Bridge 26.04.01 / 26.06 tables; steps on hardware with few cases (newhw-steps)
        *("mbridge-260401", "mbridge-2606", "newhw-steps"),
    }
    for group in summary["by_source"].values():
        assert {"cases", "step_time_cases", "step_time_s_mape_pct"} <= set(group)
    assert (
        sum(g["cases"] for g in summary["by_source"].values())
        == len(report["cases"])
        == summary["cases"]
    )


def test_validate_table_and_max_mape(capsys):
    code, out, _ = run(capsys, "validate")
    assert code == 0
    assert (
        "Predicted vs measured" in out
        and "Summary" in out
        and "korthikanti2022-tab5-megatron-22b-full" in out
    )
    code, out, err = run(capsys, "validate", "--max-mape", "0.0001")
    assert code == 1
    assert "exceed" in err
    code, _, _ = run(capsys, "validate", "--max-mape", "1000")
    assert code == 0


def test_validate_markdown_and_case_files(capsys, tmp_path):
    case = {
        "name": "tiny",
        "source": "made up",
        "model": "llama3-8b",
        "system": "dgx-h100-80gb",
        "plan": {"gpus": 8, "tp": 1, "pp": 1, "global_batch": 8, "seq_length": 2048, "zero": 1},
        "measured": {"step_time_s": 1.0},
    }
    cases = tmp_path / "mine.yaml"
    cases.write_text(yaml.safe_dump({"cases": [case]}))
    md = tmp_path / "validation.md"
    code, out, err = run(capsys, "validate", "--cases", str(cases), "--json", "--markdown", str(md))
    assert code == 0, err
    report = json.loads(out)
    assert [c["name"] for c in report["cases"]] == ["tiny"] and report["cases"][0][
        "scope"
    ] == "stage"
    text = md.read_text()
    assert "## mine" in text and "| tiny | step time (s) |" in text
    assert "paraplan validate --cv --markdown docs/validation.md" in text and "Figure 1" in text
    # issue 8: every mechanism with the component data it rests on
    assert "## Mechanisms and the component data they rest on" in text
    assert all(
        f"| {name} |" in text
        for name in ("shared links", "GEMM efficiency", "memory realism", "hardware variants")
    )


def test_validate_bad_case_file(capsys, tmp_path):
    case = {
        "name": "broken",
        "source": "made up",
        "model": "llama3-8b",
        "system": "dgx-h100-80gb",
        "plan": {"gpus": 8, "tp": 3, "global_batch": 8, "seq_length": 2048},
        "measured": {"step_time_s": 1.0},
    }
    path = tmp_path / "bad.json"
    case["plan"]["recompute"] = "most"  # malformed: an input error naming the case and the field
    path.write_text(json.dumps({"cases": [case]}))
    code, out, err = run(capsys, "validate", "--cases", str(path))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "broken" in lines[0] and "plan.recompute" in lines[0]
    # well formed but against a plan rule (tp 3 does not divide 32 heads): reported, not scored, no crash
    del case["plan"]["recompute"]
    path.write_text(json.dumps({"cases": [case]}))
    code, out, err = run(capsys, "validate", "--cases", str(path))
    assert (
        code == 0
        and "unsupported: broken: plan refused by paraplan's rules: plan.tp"
        in " ".join(out.split())
    )
    code, out, err = run(capsys, "validate", "--cases", str(path), "--max-mape", "10")
    assert code == 1 and "no case was compared" in err
