"""End to end: estimate --plan, search --cluster / --non-uniform, validate --hetero, and the AMP cases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from paraplan.cli import main
from paraplan.validate.amp_import import convert
from paraplan.validate.hetero import bundled_hetero_files, load_hetero_cases, run_hetero_cases
from tests.hetero.mixed_cluster import MIXED, MODEL, PLAN


def run(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    code = exit_info.value.code
    return (0 if code is None else code), out, err


@pytest.fixture()
def files(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    paths = {}
    for name, data in (("cluster.yaml", MIXED), ("model.yaml", MODEL), ("plan.yaml", PLAN)):
        paths[name] = tmp_path / name
        paths[name].write_text(yaml.safe_dump(data))
    return paths


def test_estimate_plan_file(capsys, files):
    code, out, _ = run(
        capsys,
        "estimate",
        "-m",
        str(files["model.yaml"]),
        "--plan",
        str(files["plan.yaml"]),
        "--cluster",
        str(files["cluster.yaml"]),
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    assert (
        data["fits"]
        and data["step_time_s"] > 0
        and [s["devices"][0]["pool"] for s in data["stages"]] == ["v100", "t4"]
    )
    code, out, _ = run(
        capsys,
        "estimate",
        "-m",
        str(files["model.yaml"]),
        "--plan",
        str(files["plan.yaml"]),
        "--cluster",
        str(files["cluster.yaml"]),
    )
    assert code == 0 and "step time" in out and "t4" in out


@pytest.mark.parametrize(
    "change, message",
    [
        ({"stages": [{"pool": "v100", "gpus": 4, "layers": 3}]}, "must sum to the model's 4"),
        ({"microbatches": 0}, "plan.microbatches"),
    ],
)
def test_estimate_plan_errors(capsys, files, change, message):
    files["plan.yaml"].write_text(yaml.safe_dump(PLAN | change))
    code, _, err = run(
        capsys,
        "estimate",
        "-m",
        str(files["model.yaml"]),
        "--plan",
        str(files["plan.yaml"]),
        "--cluster",
        str(files["cluster.yaml"]),
    )
    assert code == 2 and message in err and "Traceback" not in err


def test_estimate_without_system_is_an_input_error(capsys, files):
    code, _, err = run(capsys, "estimate", "-m", str(files["model.yaml"]), "--gpus", "8")
    assert code == 2 and "--system" in err


def test_search_cluster_and_non_uniform(capsys, files):
    code, out, _ = run(
        capsys,
        "search",
        "-m",
        str(files["model.yaml"]),
        "--cluster",
        str(files["cluster.yaml"]),
        "--global-batch",
        "8",
        "--seq-length",
        "512",
        "--dtype",
        "fp16",
        "--top",
        "2",
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    assert data["mode"] == "amp-dp" and len(data["plans"]) == 2
    assert data["plans"][0]["step_time_s"] <= data["plans"][1]["step_time_s"]
    code, out, _ = run(
        capsys,
        "search",
        "-m",
        str(files["model.yaml"]),
        "-s",
        "aws-g4dn.12xlarge",
        "--gpus",
        "4",
        "--non-uniform",
        "--global-batch",
        "8",
        "--seq-length",
        "512",
        "--dtype",
        "fp16",
        "--top",
        "1",
    )
    assert code == 0 and "search exact" in out
    # the status line --cluster prints: 4 GPUs, R = 2 modes, M = 4 micro-batch counts, up to 4 stages,
    # w(1..4) = R, 2R, R, 3R: M·(3R + 6R² + 6R³ + R⁴) = 4·94 = 376 (non_uniform_space_size)
    assert out.splitlines()[-1] == (
        "finished: the search ran to the end of its space (376 candidates before the per-stage "
        "rules); the plans above are the best of all"
    )


def test_the_non_uniform_local_search_says_it_finished_without_claiming_the_best_of_all(
    capsys, files
):
    """Bottleneck alleviation (16 GPUs: a space too large to enumerate) prints its status line through the
    renderer of --cluster; a local search never says its plans are the best of all."""
    argv = ["search", "-m", str(files["model.yaml"]), "-s", "aws-g4dn.12xlarge", "--gpus", "16"]
    code, out, _ = run(
        capsys,
        *argv,
        "--non-uniform",
        "--global-batch",
        "8",
        "--seq-length",
        "512",
        "--top",
        "1",
        "--time-budget",
        "60",
    )
    last = out.splitlines()[-1]
    assert code == 0 and "search alleviation" in out
    assert last.startswith("finished: bottleneck alleviation ran to its end within the time budget")
    assert last.endswith("candidates before the per-stage rules") and "best of all" not in out


def test_validate_hetero_cli(capsys):
    code, out, _ = run(capsys, "validate", "--hetero", "--json")
    assert code == 0
    summary = json.loads(out)["summary"]
    assert set(summary["by_group"]) == {"amp-mixed", "amp-t4"}


# ---- AMP trials as cases ----------------------------------------------------------------------
RECORDS = (
    Path(__file__).resolve().parents[3] / "shared" / "reference" / "published" / "amp-trials.json"
)


def test_bundled_amp_cases():
    (path,) = bundled_hetero_files()
    cases = load_hetero_cases()
    assert path.name == "amp2022.json" and len(cases) == 105
    assert sum(c.must_not_fit for c in cases) == 15
    assert {c.group for c in cases} == {"amp-mixed", "amp-t4"}
    first = next(c for c in cases if c.name == "het-001")
    # AMP rank order (pp, dp, mp): with pp = 4 each stage is one node; the T4 node holds the last stage
    assert [s.devices[0].pool for s in first.plan.stages] == ["v100", "v100", "v100", "t4"]
    assert [s.layers for s in first.plan.stages] == [5, 7, 6, 6] and first.measured == {
        "step_time_s": 1.47
    }


@pytest.mark.skipif(not RECORDS.exists(), reason="reference records not beside the repository")
def test_bundled_file_is_the_conversion_of_the_records():
    (path,) = bundled_hetero_files()
    assert json.loads(path.read_text()) == convert(RECORDS)


def test_amp_report_against_amps_own_error():
    """We report our error beside AMP's own on the same trials; on the mixed cluster ours is lower."""
    report = run_hetero_cases(load_hetero_cases())
    groups = report["summary"]["by_group"]
    mixed = groups["amp-mixed"]
    assert mixed["step_time_cases"] == 43 and mixed["reference_mape_pct"][
        "amp_predicted_s"
    ] == pytest.approx(49.4, abs=0.1)
    assert mixed["step_time_s_mape_pct"] < mixed["reference_mape_pct"]["amp_predicted_s"]
    for entry in report["cases"]:
        assert entry["predicted"]["step_time_s"] > 0


HET_001 = {  # AMP's trial het-001 as reference/published/amp-trials.json records it (the fields the converter reads)
    "id": "het-001",
    "arch": {
        "name": "GPT-2 medium-like (AMP gpt2)",
        "layers": 24,
        "hidden": 1024,
        "heads": 16,
        "seq": 1024,
        "vocab": 52256,
    },
    "hardware": {
        "nodes": [
            {"node": i, "instance": inst}
            for i, inst in enumerate(["p3.8xlarge", "p3.8xlarge", "p3.8xlarge", "g4dn.12xlarge"])
        ]
    },
    "parallelism": {
        "tp": 1,
        "dp": 4,
        "pp": 4,
        "stage_boundaries": [0, 7, 14, 20, 30],
        "stage_boundaries_meaning": "stage i holds [b_i, b_{i+1}) of a 30-entry op list",
    },
    "batch": {"gbs": 32, "mbs": 1, "seq": 1024, "ga": 8},
    "measured": {"step_time_s": 1.47, "failed": False, "amp_predicted_s": 1.0859},
    "source": {
        "title": "AMP (NeurIPS 2022) cached real trials",
        "repo": "DachengLi1/AMP",
        "path": "src/results/het_cluster_results.txt",
        "commit": "72eeea4",
        "paper": "arXiv 2210.07297",
    },
}


def test_validate_reads_amp_trial_records_as_given(capsys, tmp_path):
    """A file of AMP's raw trial records (the format of reference/published/amp-trials.json, whose notes quote
    "[b_i, b_{i+1})" without making the file look deeply nested) validates as the converted cases would; a record the
    converter cannot read is a one-line input error naming it."""
    records = tmp_path / "records.json"
    records.write_text(json.dumps({"about": "AMP trials [subset]", "records": [HET_001]}))
    code, out, _ = run(capsys, "validate", "--cases", str(records), "--json")
    assert code == 0
    (case,) = json.loads(out)["cases"]
    bundled = next(
        c for c in run_hetero_cases(load_hetero_cases())["cases"] if c["name"] == "het-001"
    )
    assert (
        case["name"] == "het-001"
        and case["predicted"]["step_time_s"] == bundled["predicted"]["step_time_s"]
    )
    broken = dict(HET_001, hardware={"nodes": [{"node": 0, "instance": "p4d.24xlarge"}] * 4})
    records.write_text(json.dumps({"records": [broken]}))
    code, _, err = run(capsys, "validate", "--cases", str(records))
    assert code == 2 and "het-001" in err and len(err.strip().splitlines()) == 1
