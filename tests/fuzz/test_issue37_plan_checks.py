"""Issue 37: ``export`` and ``import plan`` apply the plan checks the estimator applies
(specs.plan.plan_violations with --model, plan_only_violations without one), refusing an invalid
plan at exit 2 by field instead of writing or reading it."""

from __future__ import annotations

import json

import pytest

BASE = {"gpus": 64, "global_batch": 64, "seq_length": 2048}
BROKEN = [
    ({"tp": 8, "dp": 3}, "plan.dp: 3"),  # degrees that do not make the GPUs
    ({"tp": 3}, "plan.tp: 3"),  # tp that does not divide the GPUs
    ({"tp": 8, "micro_batch": 3}, "plan.global_batch: 64"),  # batch not split by dp·micro_batch
    ({"tp": 8, "cp": 8, "seq_length": 2052}, "plan.seq_length: 2052"),  # cp splits no sequence
]


@pytest.mark.parametrize(("fields", "field"), BROKEN)
def test_export_refuses_a_plan_the_estimator_refuses(cli, tmp_path, fields, field):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(BASE | fields))
    for extra in ((), ("-m", "gpt3-1.3b")):
        _, out, err = cli("export", path, *extra, codes=(2,))
        assert err.startswith("error: PLAN: ") and field in err, err
        assert not out


def test_export_with_a_model_checks_the_model_rules(cli, tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(BASE | {"tp": 8, "dp": 8}))
    code, _, _ = cli("export", path, "-m", "llama3-8b")
    assert code == 0
    path.write_text(
        json.dumps(BASE | {"tp": 64})
    )  # fine without a model: no rule of the plan alone
    assert cli("export", path)[0] == 0
    _, _, err = cli("export", path, "-m", "llama3-8b", codes=(2,))
    assert "plan.tp: 64" in err, err


def test_import_refuses_an_invalid_launch_line(cli, tmp_path):
    line = (
        "torchrun --nnodes 8 --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 3 "
        "--pipeline-model-parallel-size 1 --micro-batch-size 1 --global-batch-size 64 --seq-length 2048\n"
    )
    path = tmp_path / "launch.sh"
    path.write_text(line)
    _, out, err = cli("import", "plan", path, codes=(2,))
    assert err.startswith("error: file: plan.tp: 3") and not out, err
    path.write_text(line.replace("size 3", "size 8"))
    code, out, _ = cli("import", "plan", path)
    assert code == 0 and json.loads(out)["plan"]["dp"] == 8
