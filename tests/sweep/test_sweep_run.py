"""`paraplan sweep | plot` and `estimate --plot`: results, files, determinism, resume and executors.

Every sweep here is tiny (gpt3-1.3b on 8 and 16 A100s, two HBM bandwidths, a restricted plan
space): each point searches in well under a second.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import paraplan.sweep.executors as sweep_executors
from paraplan.cli import main
from paraplan.specs.errors import InputError
from paraplan.sweep.params import parse_set
from paraplan.sweep.run import SweepConfig, run_sweep

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PLOTS = ("strong_scaling", "breakdown", "memory", "heatmap")
ARGS = [
    "--model",
    "gpt3-1.3b",
    "--system",
    "dgx-a100-80gb",
    "--gpus",
    "8,16",
    "--set",
    "accelerator.hbm_bandwidth=1TB/s,2TB/s",
    "--global-batch",
    "64",
    "--seq-length",
    "2048",
    "--tp",
    "1,2",
    "--pp",
    "1,2",
    "--no-offload",
    "--default-overlap",
    "--default-placement",
    "--top",
    "3",
]
CONFIG = SweepConfig(
    model="gpt3-1.3b",
    systems=("dgx-a100-80gb",),
    gpus=(8, 16),
    seq_length=2048,
    sets=(parse_set("accelerator.hbm_bandwidth=1TB/s,2TB/s"),),
    global_batch=64,
    top=3,
    no_offload=True,
    default_overlap=True,
    default_placement=True,
    restrictions={"tp": (1, 2), "pp": (1, 2)},
)


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return (exit_info.value.code or 0), out, err


def assert_png(path: Path) -> None:
    assert path.read_bytes()[:8] == PNG_SIGNATURE, path


def assert_svg(path: Path) -> None:
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg"), path


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> Path:
    """The tiny sweep, run once in this process with plots."""
    out = tmp_path_factory.mktemp("baseline")
    outcome = run_sweep(CONFIG, out)
    assert outcome.ran == 4 and outcome.skipped == 0
    return out


def test_sweep_json_has_every_point_in_cartesian_order(baseline):
    doc = json.loads((baseline / "sweep.json").read_text())
    pts = doc["points"]
    assert [(p["system"], p["gpus"], p["accelerator.hbm_bandwidth"]) for p in pts] == [
        ("dgx-a100-80gb", 8, "1TB/s"),
        ("dgx-a100-80gb", 8, "2TB/s"),
        ("dgx-a100-80gb", 16, "1TB/s"),
        ("dgx-a100-80gb", 16, "2TB/s"),
    ]
    for p in pts:
        assert p["feasible"] is True
        assert p["set_si"] == {
            "accelerator.hbm_bandwidth": 1e12 if p["accelerator.hbm_bandwidth"] == "1TB/s" else 2e12
        }
        assert (
            p["plan"]["gpus"] == p["gpus"]
            and p["plan"]["tp"] in (1, 2)
            and p["plan"]["pp"] in (1, 2)
        )
        assert p["step_time_s"] > 0 and p["tokens_per_s"] > 0 and 0 < p["mfu"] < 1
        assert (
            abs(sum(p["breakdown"].values()) - p["step_time_s"]) < 1e-8 * p["step_time_s"]
        )  # 9 digits written
        mem = p["memory"]
        parts = sum(
            mem[f"{k}_gib"]
            for k in ("weights", "gradients", "optimizer", "activations", "buffers", "reserved")
        )
        assert (
            abs(parts - mem["peak_gib"]) < 1e-8 * mem["peak_gib"]
            and mem["peak_gib"] <= mem["capacity_gib"]
        )
        assert 1 <= len(p["top"]) <= 3 and p["top"][0]["plan"] == p["plan"]
        assert [t["rank"] for t in p["top"]] == list(range(1, len(p["top"]) + 1))
    # more HBM bandwidth never makes the best plan slower
    assert (
        pts[1]["step_time_s"] <= pts[0]["step_time_s"]
        and pts[3]["step_time_s"] <= pts[2]["step_time_s"]
    )
    assert "seconds" not in (baseline / "sweep.json").read_text()  # no wall-clock field
    assert doc["sweep"]["sets"] == [
        {"path": "accelerator.hbm_bandwidth", "values": ["1TB/s", "2TB/s"]}
    ]
    lines = (baseline / "sweep.csv").read_text().splitlines()
    assert lines[0].startswith(
        "index,system,gpus,accelerator.hbm_bandwidth,feasible,global_batch,step_time_s"
    )
    assert len(lines) == 5


def test_sweep_writes_png_and_svg_plots(baseline):
    for name in PLOTS:
        assert_png(baseline / f"{name}.png")
        assert_svg(baseline / f"{name}.svg")


def test_sweep_is_byte_identical_across_runs(baseline, tmp_path, capsys):
    code, out, err = run_cli(capsys, "sweep", *ARGS, "--out", str(tmp_path), "--no-plot")
    assert code == 0, err
    assert "Best plan per point" in out and "4 points searched" in out
    for name in ("sweep.json", "sweep.csv"):
        assert (tmp_path / name).read_bytes() == (baseline / name).read_bytes(), name
    assert not list(tmp_path.glob("*.png"))


def test_resume_skips_finished_points(baseline, tmp_path, monkeypatch):
    shutil.copy(baseline / "config.json", tmp_path / "config.json")
    finished = (baseline / "points.jsonl").read_text().splitlines()
    (tmp_path / "points.jsonl").write_text(
        finished[0] + "\n" + finished[1] + "\n" + finished[2][:40]
    )  # torn line
    calls = []
    real = sweep_executors.run_point
    monkeypatch.setattr(
        sweep_executors, "run_point", lambda task: calls.append(task["index"]) or real(task)
    )
    outcome = run_sweep(CONFIG, tmp_path, resume=True, plots=False)
    assert outcome.skipped == 2 and outcome.ran == 2
    done = {json.loads(line)["index"] for line in finished[:2]}
    assert sorted(calls) == sorted({0, 1, 2, 3} - done)
    assert (tmp_path / "sweep.json").read_bytes() == (baseline / "sweep.json").read_bytes()
    journal = (
        (tmp_path / "points.jsonl").read_text().splitlines()
    )  # append-only: the torn line stays
    assert journal[:2] == finished[:2] and journal[2] == finished[2][:40] and len(journal) == 5
    calls.clear()
    assert run_sweep(CONFIG, tmp_path, resume=True, plots=False).ran == 0 and calls == []
    other = SweepConfig(**{**CONFIG.__dict__, "seq_length": 1024})
    with pytest.raises(
        InputError, match="--resume: .* holds a different sweep \\(seq_length differs\\)"
    ):
        run_sweep(other, tmp_path, resume=True, plots=False)


def test_dask_local_cluster_and_processes_give_the_local_result(baseline, tmp_path):
    pytest.importorskip("distributed")
    dask_out = run_sweep(CONFIG, tmp_path / "dask", dask="local", plots=False)
    assert dask_out.ran == 4
    assert (tmp_path / "dask" / "sweep.json").read_bytes() == (baseline / "sweep.json").read_bytes()
    run_sweep(CONFIG, tmp_path / "procs", workers=2, plots=False)
    assert (tmp_path / "procs" / "sweep.json").read_bytes() == (
        baseline / "sweep.json"
    ).read_bytes()


def test_plot_redraws_from_saved_results(baseline, tmp_path, capsys):
    code, out, err = run_cli(capsys, "plot", str(baseline / "sweep.json"), "--out", str(tmp_path))
    assert code == 0, err
    for name in PLOTS:
        assert_png(tmp_path / f"{name}.png")
        assert_svg(tmp_path / f"{name}.svg")
        assert (tmp_path / f"{name}.png").read_bytes() == (baseline / f"{name}.png").read_bytes()
    (tmp_path / "bad.json").write_text('{"points": 3}')
    code, _, err = run_cli(capsys, "plot", str(tmp_path / "bad.json"))
    assert code == 2 and err.startswith("error: sweep.json:") and err.count("\n") == 1


def test_points_without_a_plan_are_recorded_and_drawn(tmp_path):
    config = SweepConfig(
        model="gpt3-175b",
        systems=("dgx-a100-80gb",),
        gpus=(8, 128),
        seq_length=2048,
        global_batch=8,
        top=2,
        no_offload=True,
        default_overlap=True,
        default_placement=True,
        restrictions={"tp": (8,), "pp": (1,), "cp": (1,), "recompute": ("full",)},
    )
    doc = run_sweep(config, tmp_path).document
    miss, split = doc["points"]
    assert miss["feasible"] is False and miss["plan"] is None and miss["step_time_s"] is None
    assert (
        miss["nearest_miss"]["memory"]["peak_gib"] > miss["nearest_miss"]["memory"]["capacity_gib"]
    )
    assert "nearest miss needs" in miss["reason"]
    assert (
        split["feasible"] is False and "minimum data-parallel degree 16" in split["reason"]
    )  # tp8: dp 16 > batch 8
    for name in ("strong_scaling", "breakdown", "memory"):
        assert_png(tmp_path / f"{name}.png")


def test_estimate_plot_png_and_svg(tmp_path, capsys):
    base = [
        "estimate",
        "--model",
        "gpt3-1.3b",
        "--system",
        "dgx-a100-80gb",
        "--gpus",
        "8",
        "--tp",
        "2",
        "--pp",
        "2",
        "--global-batch",
        "16",
    ]
    code, out, err = run_cli(capsys, *base, "--plot", str(tmp_path / "one.png"))
    assert code == 0, err
    assert f"wrote {tmp_path / 'one.png'}" in out
    assert_png(tmp_path / "one.png")
    (
        tmp_path / "sub"
    ).mkdir()  # --plot writes into an existing directory (a missing one is an input error)
    code, out, err = run_cli(capsys, *base, "--json", "--plot", str(tmp_path / "sub" / "one.svg"))
    assert code == 0, err
    json.loads(out)  # stdout stays pure JSON
    assert_svg(tmp_path / "sub" / "one.svg")
    code, _, err = run_cli(capsys, *base, "--plot", str(tmp_path / "one.pdf"))
    assert (
        code == 2
        and err.startswith("error: --plot:")
        and ".png or .svg" in err
        and err.count("\n") == 1
    )


def test_sweep_vary_split_reaches_each_point_and_keeps_older_configs(tmp_path, capsys):
    """``sweep --vary-split`` searches every point with SearchProblem.vary_split (the README's DeepSeek-V3 layout:
    the loss and its MTP module counted as layers); the config records it only when on, so a sweep written before
    the option existed still resumes."""
    assert "vary_split" not in CONFIG.to_dict()
    code, out, err = run_cli(
        capsys,
        "sweep",
        "--model",
        "deepseek-v3",
        "--system",
        "dgx-h800",
        "--gpus",
        "2048",
        "--global-batch",
        "15360",
        "--seq-length",
        "4096",
        "--dtype",
        "fp8",
        "--tp",
        "2",
        "--pp",
        "16",
        "--cp",
        "1",
        "--micro-batch",
        "1",
        "--no-offload",
        "--default-overlap",
        "--default-placement",
        "--top",
        "1",
        "--no-plot",
        "--vary-split",
        "--out",
        str(tmp_path / "split"),
    )
    assert code == 0, err
    doc = json.loads((tmp_path / "split" / "sweep.json").read_text())
    assert doc["sweep"]["vary_split"] is True
    best = doc["points"][0]["top"][0]["plan"]
    assert best["loss_as_layer"] and not best["embedding_as_layer"]


def test_sweep_with_a_framework_searches_what_search_does(tmp_path):
    """``sweep --framework P`` carries P's run-wide knobs (llm-foundry: bf16 gradient reduction) into each
    point's search, so a point's best plan is ``search --framework P``'s (api.search)."""
    from paraplan.api import search

    config = SweepConfig(
        model="gpt3-1.3b",
        systems=("dgx-a100-80gb",),
        gpus=(16,),
        seq_length=2048,
        global_batch=64,
        top=1,
        no_offload=True,
        default_overlap=True,
        default_placement=True,
        restrictions={"tp": (1,), "pp": (1,), "zero": (3,)},
        framework="llm-foundry",
    )
    point = run_sweep(config, tmp_path).document["points"][0]
    best = search(
        "gpt3-1.3b",
        "dgx-a100-80gb",
        gpus=16,
        seq_length=2048,
        global_batch=64,
        top=1,
        framework="llm-foundry",
        vary_offload=False,
        vary_overlap=False,
        vary_placement=False,
        tp=[1],
        pp=[1],
        zero=[3],
    ).plans[0]
    assert point["step_time_s"] == pytest.approx(best.estimate.step_time_s, rel=1e-8)
    assert best.plan.grad_dtype == "bf16"  # the profile's knob reached the plan
