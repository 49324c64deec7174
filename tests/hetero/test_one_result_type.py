"""One result type (issue 31): a per-stage plan's estimate is step.result.Estimate, as a uniform plan's,
with the plan-wide totals of step.stage_totals (FLOPs, mean peak, system) and its per-stage fields; the
``estimate --plan --json`` keys of before stay, the uniform ones are added."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml

from paraplan import api
from paraplan.catalog.clusters import cluster_from_dict
from paraplan.cli import main
from paraplan.cost.flops import model_flops_per_step
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan_label import plan_text
from paraplan.specs.stage_plan import settled_stage_plan, stage_plan_from_dict
from paraplan.step.per_stage import estimate_stage_plan
from paraplan.step.result import Estimate
from paraplan.step.stage_totals import stage_plan_fields
from tests.hetero.mixed_cluster import MIXED, MODEL, PLAN

OLD_JSON_KEYS = {"step_time_s", "tokens_per_s", "fits", "problems", "gpus", "breakdown", "stages"}
ADDED_JSON_KEYS = {
    "model",
    "system",
    "plan",
    "mfu",
    "hfu",
    "model_tflops_per_gpu",
    "model_flops_per_step",
    "hardware_flops_per_step",
    "memory",
}


def _estimate() -> Estimate:
    model = ModelSpec(**MODEL)
    return estimate_stage_plan(model, cluster_from_dict(MIXED), stage_plan_from_dict(PLAN))


def test_per_stage_estimate_fills_the_plan_wide_fields_by_hand():
    """4 V100 (125 TFLOP/s fp16) and 4 T4 (65): mean peak (4·125 + 4·65) / 8 = 95 TFLOP/s. The T4 stage
    (1 of 4 layers) recomputes in full: per token 2·L·(4h² + 2hf) + 2·L·(s+1)·h = 2·4·(4·512² +
    2·512·2048) + 2·4·513·512 = 27,267,072 FLOPs, a quarter of it on 8·512 tokens: 27,921,481,728."""
    est = _estimate()
    assert type(est) is Estimate and est.per_stage
    assert (est.model, est.system, est.gpus, est.tokens_per_step) == ("custom", "mixed", 8, 4096)
    assert est.peak_flops_per_gpu == 95e12
    model_flops = model_flops_per_step(ModelSpec(**MODEL), 512, 8)
    assert est.model_flops_per_step == model_flops
    assert est.hardware_flops_per_step == pytest.approx(model_flops + 27_921_481_728, rel=1e-12)
    assert est.mfu == pytest.approx(model_flops / est.step_time_s / (8 * 95e12), rel=1e-12)
    assert est.hfu > est.mfu
    assert len(est.stage_work_s) == len(est.stage_tail_s) == len(est.stage_summary) == 2
    assert est.peak_stage in est.stages and est.fit == "fits"
    record = est.to_record()
    assert record["plan_label"] == plan_text(est.plan) and record["mfu"] == est.mfu
    assert "MFU" in repr(est) and "v100" in repr(est)


def test_stage_plan_label_by_hand():
    assert plan_text(stage_plan_from_dict(PLAN)) == (
        "pp2 m2 1f1b zero0: 4 v100 tp1 dp4 rc:none L3 | 4 t4 tp1 dp4 rc:full L1"
    )
    assert plan_text(_estimate().plan) == plan_text(stage_plan_from_dict(PLAN))


def test_the_plan_record_states_each_stage_dp():
    """A stage's dp left to be inferred (0) is recorded as the one it runs: 4 GPUs / tp 1 = 4; the DP
    overlap left unset as its pools' stacks run it (specs.stage_plan.settled_stage_plan: true, no DeepSpeed)."""
    plan = stage_plan_from_dict(PLAN)
    assert [s.dp for s in plan.stages] == [0, 0]
    assert [s["dp"] for s in stage_plan_fields(plan)["stages"]] == [4, 4]
    settled = settled_stage_plan(plan, cluster_from_dict(MIXED))
    assert plan.overlap_dp_grad_reduce is None and settled.overlap_dp_grad_reduce is True
    assert _estimate().plan == stage_plan_fields(settled)


def test_problems_make_a_plan_not_fit():
    est = replace(_estimate(), problems=("stage 1 holds no parameters",))
    assert not est.fits and est.fit == "does not fit"
    assert est.to_dict()["problems"] == ["stage 1 holds no parameters"]


def test_uniform_estimate_to_dict_has_no_per_stage_keys():
    est = api.estimate("gpt3-125m", "dgx-h100-80gb", gpus=8, global_batch=8)
    assert not est.per_stage
    assert not {"problems", "gpus", "stages"} & set(est.to_dict())


def test_api_and_cli_json_read_one_estimate(tmp_path, capsys, monkeypatch):
    """``api.estimate_stages`` is ``estimate --plan``; its JSON keeps the keys of before and adds the
    uniform estimate's."""
    monkeypatch.setenv("COLUMNS", "200")
    paths = {}
    for name, data in (("cluster.yaml", MIXED), ("model.yaml", MODEL), ("plan.yaml", PLAN)):
        paths[name] = tmp_path / name
        paths[name].write_text(yaml.safe_dump(data))
    est = api.estimate_stages(MODEL, PLAN, MIXED)
    assert est == _estimate()
    argv = ["estimate", "-m", str(paths["model.yaml"]), "--plan", str(paths["plan.yaml"])]
    with pytest.raises(SystemExit):
        main([*argv, "--cluster", str(paths["cluster.yaml"]), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert OLD_JSON_KEYS | ADDED_JSON_KEYS | {"stage_plan"} == set(data)
    assert data["step_time_s"] == est.step_time_s and data["mfu"] == est.mfu
    assert data["stages"][1]["work_per_microbatch_s"] == est.stage_work_s[1]


def test_api_estimate_stages_on_a_system():
    plan = PLAN | {"stages": [{"pool": "dgx-h100-80gb", "gpus": 4, "layers": 4}]}
    est = api.estimate_stages(MODEL, plan, system="dgx-h100-80gb")
    assert est.system == "dgx-h100-80gb" and est.gpus == 4 and est.fits
    with pytest.raises(api.InputError):
        api.estimate_stages(MODEL, plan)
