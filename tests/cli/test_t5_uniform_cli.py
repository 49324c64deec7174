"""`paraplan estimate` and `paraplan search` with the uniform options for an encoder-decoder (T5): costed
stage by stage (specs.uniform_stages → step.per_stage / search.staged.hetero), one-line refusals, exit codes."""

from __future__ import annotations

import json

import pytest
import yaml

from paraplan.catalog import load_model, load_system
from paraplan.step.per_stage import estimate_stage_plan
from paraplan.specs.cluster import uniform_cluster
from paraplan.specs.stage_plan import stage_plan_from_dict

T5 = ["--model", "t5-3b", "--system", "dgx-a100-80gb"]
ESTIMATE = [
    "estimate",
    *T5,
    "--gpus",
    "16",
    "--tp",
    "2",
    "--pp",
    "2",
    "--global-batch",
    "64",
    "--micro-batch",
    "4",
    "--seq-length",
    "512",
]
SEARCH = ["search", *T5, "--gpus", "16", "--global-batch", "64", "--seq-length", "512"]


def test_estimate_prints_the_per_stage_report(cli):
    code, out, err = cli(*ESTIMATE)
    assert code == 0, err
    assert "t5-3b on 16x dgx-a100-80gb: 2 stages, 16 GPUs, 4 micro-batches" in out
    assert "costed stage by stage" in out and "layers per stage 24,24" in out
    assert "Stages" in out and "step time" in out and "fits in memory" in out


def test_estimate_json_is_the_hand_built_stage_plan_estimate(cli):
    """tp 2 · pp 2 · dp 4: two stages of 8 GPUs, 24 layers each, micro-batch 4."""
    code, out, err = cli(*ESTIMATE, "--json")
    assert code == 0, err
    data = json.loads(out)
    hand = stage_plan_from_dict(
        {
            "global_batch": 64,
            "seq_length": 512,
            "micro_batch": 4,
            "stages": [{"pool": "dgx-a100-80gb", "gpus": 8, "tp": 2, "layers": 24}] * 2,
        }
    )
    ref = estimate_stage_plan(
        load_model("t5-3b"), uniform_cluster(load_system("dgx-a100-80gb"), 16), hand
    )
    assert data["step_time_s"] == ref.step_time_s and data["fits"] is True
    assert {k: v for k, v in data.items() if k != "stage_plan"} == json.loads(
        json.dumps(ref.to_dict())
    )
    assert [s["layers"] for s in data["stage_plan"]["stages"]] == [24, 24]


@pytest.mark.parametrize(
    "extra, named",
    [
        (["--cp", "2"], "plan.cp: 2 is not allowed"),
        (["--vpp", "2"], "plan.vpp: 2 is not allowed"),
        (["--ops"], "--ops: not allowed for an encoder-decoder model"),
        (["--framework", "megatron"], "--framework: not allowed for an encoder-decoder model"),
    ],
)
def test_estimate_refuses_what_the_stage_plan_cannot_carry(cli, extra, named):
    code, out, err = cli(*ESTIMATE, *extra)
    assert code == 2 and out == "" and err.count("\n") == 1 and named in err and "allowed" in err


def test_estimate_carries_the_offloads(cli):
    """Offload is carried stage by stage (issue 31: specs.uniform_stages.CARRIED_FIELDS): the per-stage path
    prices the T5 plan's activation offload, an exposed offload part the plan without it has not."""
    code, out, _ = cli(*ESTIMATE, "--json")
    code_off, out_off, err = cli(*ESTIMATE, "--offload-activations", "--json")
    assert code == 0 and code_off == 0, err
    assert json.loads(out)["breakdown"]["offload_s"] == 0.0
    assert json.loads(out_off)["breakdown"]["offload_s"] > 0.0


def test_estimate_keeps_the_schedules_rules(cli):
    """A per-stage plan runs every schedule (zb-h1, dualpipe: step.per_stage); DualPipe's batch rule
    (specs.rules_schedule.dualpipe_rule) refuses 2 micro-batches on 2 stages in a uniform plan's words."""
    args = [
        a if a != "64" else "32" for a in ESTIMATE
    ]  # global batch 32: 2 micro-batches of 4 on dp 4
    code, out, err = cli(*args, "--schedule", "dualpipe")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert (
        "plan.schedule: 'dualpipe' is not allowed; needs an even pp and an even micro-batch" in err
    )
    code, out, _ = cli(*ESTIMATE, "--schedule", "zb-h1")
    assert code == 0 and "step time" in out


def test_estimate_that_does_not_fit_exits_1(cli):
    code, out, _ = cli(
        "estimate",
        *T5,
        "--gpus",
        "1",
        "--global-batch",
        "64",
        "--micro-batch",
        "64",
        "--seq-length",
        "512",
    )
    assert code == 1 and "does NOT fit in memory" in out


def test_per_stage_plan_file_that_does_not_fit_exits_1(cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        yaml.safe_dump(
            {
                "global_batch": 64,
                "seq_length": 512,
                "micro_batch": 64,
                "stages": [{"pool": "dgx-a100-80gb", "gpus": 1, "layers": 48}],
            }
        )
    )
    code, out, _ = cli("estimate", *T5, "--plan", str(plan))
    assert code == 1 and "does NOT fit in memory" in out


def test_search_runs_the_amp_style_search(cli):
    code, out, err = cli(*SEARCH, "--top", "2")
    assert code == 0, err
    header = out.splitlines()[0]
    assert "search amp-dp" in header and "encoder-decoder: AMP-style per-stage search" in header
    code, out, err = cli(*SEARCH, "--top", "2", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert (
        data["mode"] == "amp-dp" and len(data["plans"]) == 2 and "encoder-decoder" in data["note"]
    )


@pytest.mark.parametrize(
    "argv, named",
    [
        (["search", *T5, "--gpus", "16", "--seq-length", "512"], "--global-batch: missing"),
        (
            [*SEARCH, "--cp", "2", "--objective", "cost"],
            "--objective: not allowed for an encoder-decoder model",
        ),
        # --cp is one of the per-stage searches' axes (search.staged.axes); an encoder-decoder takes cp 1
        ([*SEARCH, "--cp", "2"], "--cp: '2' is not allowed; an encoder-decoder's cross-attention"),
        ([*SEARCH, "--exhaustive"], "--exhaustive: not allowed"),
    ],
)
def test_search_refuses_what_it_cannot_honour(cli, argv, named):
    code, out, err = cli(*argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and named in err


def test_search_takes_axis_restrictions(cli):
    """--tp / --pp / --micro-batch / --recompute restrict the AMP-style search: every plan it returns obeys them."""
    code, out, err = cli(
        *SEARCH,
        "--tp",
        "2",
        "--pp",
        "2,4",
        "--micro-batch",
        "2",
        "--recompute",
        "none,selective",
        "--top",
        "5",
        "--json",
    )
    assert code == 0, err
    plans = json.loads(out)["plans"]
    assert plans
    for item in plans:
        stages = item["plan"]["stages"]
        assert len(stages) in (2, 4) and all(s["tp"] == 2 for s in stages)
        assert {s.get("recompute", "none") for s in stages} <= {"none", "selective"}
        assert item["label"].split(" mb")[1].startswith("2 ")


def test_search_restrictions_that_leave_nothing_say_so(cli):
    code, out, _ = cli(*SEARCH, "--tp", "3")
    assert code == 1 and "no candidate" in out
