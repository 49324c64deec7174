"""search -> export -> import -> estimate gives the same plan and step time (issue 34), for every row of
the README's searches and of MoE searches (DeepSeek-V3, Qwen3-235B, Mixtral), for every framework the
row says launches it; every other framework refuses it by plan knob (a row may have none: the DeepEP
dispatcher has no mapping outside Megatron-LM)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.cli import main
from paraplan.export import FRAMEWORKS, ExportRefused, export_plan, import_plan
from paraplan.export.common import canonical_plan
from paraplan.export.megatron_core import written_plan
from paraplan.export.torchtitan_split import written_plan as torchtitan_written_plan
from paraplan.search.launch import targets
from paraplan.specs.plan import PlanSpec
from paraplan.step.estimate import estimate

SEARCHES = {
    "readme-headline": "-m gpt3-175b -s dgx-a100-80gb --gpus 1024 --max-global-batch 1024 --seq-length 2048"
    " --top 5",
    "readme-deepseek-v3": "-m deepseek-v3 -s dgx-h800 --gpus 2048 --seq-length 4096 --global-batch 15360"
    " --dtype fp8 --tp 1,2,4,8 --pp 8,16 --cp 1 --ep 8,16,32,64 --micro-batch 1,2 --no-offload"
    " --default-placement --top 3",
    "qwen3-235b": "-m qwen3-235b-a22b -s dgx-h100-80gb --gpus 256 --seq-length 4096 --global-batch 512"
    " --tp 2,4,8 --pp 4,8 --cp 1 --ep 8,16 --micro-batch 1 --no-offload --default-placement --top 3",
    "mixtral-megatron": "-m mixtral-8x7b -s dgx-h100-80gb --gpus 64 --seq-length 4096 --global-batch 256"
    " --tp 1,2,4 --pp 1,2,4 --cp 1 --micro-batch 1,2 --top 3 --framework megatron-core",
}
# the same searches under each launcher profile (search.launch): every row launches in its exporters
HEADLINE = SEARCHES["readme-headline"]
MIXTRAL = SEARCHES["mixtral-megatron"].replace(" --framework megatron-core", "")
SEARCHES |= {
    "readme-headline-torchtitan": HEADLINE + " --framework torchtitan",
    "readme-headline-deepspeed": HEADLINE + " --framework deepspeed",
    "readme-headline-nemo": HEADLINE + " --framework nemo-24.09",
    "readme-deepseek-v3-nemo": SEARCHES["readme-deepseek-v3"] + " --framework nemo-24.09",
    "qwen3-235b-megatron-bridge": SEARCHES["qwen3-235b"] + " --framework megatron-bridge-25.11",
    "mixtral-torchtitan": MIXTRAL + " --framework torchtitan-compiled",
    "mixtral-deepspeed": MIXTRAL + " --framework deepspeed",
}


def _search(args: str) -> dict:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit) as exc:
        main(["search", *args.split(), "--json"])
    assert (exc.value.code or 0) == 0
    return json.loads(buf.getvalue())


@pytest.mark.parametrize("name", sorted(SEARCHES))
def test_every_row_round_trips_through_each_framework_that_launches_it(name):
    doc = _search(SEARCHES[name])
    problem = doc["problem"]
    model, system = load_model(problem["model"]), load_system(problem["system"])
    if problem["framework"]:
        from paraplan.catalog import load_framework
        from paraplan.cost.frameworks import framework_system

        system = framework_system(load_framework(problem["framework"]), system)
    assert doc["plans"]
    for row in doc["plans"]:
        plan = PlanSpec(**row["plan"])
        # a filtered search: each of its launcher's exporters writes every row (search.launch.targets)
        assert set(targets(problem["framework"])) <= set(row["frameworks"]), (name, row["rank"])
        for fw in FRAMEWORKS:
            try:
                text = export_plan(fw, plan, model)
            except ExportRefused as exc:
                assert fw not in row["frameworks"]
                assert re.match(r"plan\.\w+=", str(exc)), str(exc)
                continue
            assert fw in row["frameworks"]
            back = PlanSpec(**import_plan(fw, text, model, plan.seq_length))
            as_written = (torchtitan_written_plan if fw == "torchtitan" else written_plan)(
                plan, model
            )
            assert canonical_plan(back) == canonical_plan(as_written), (name, fw)
            est = estimate(model, system, back)
            assert math.isclose(est.step_time_s, row["step_time_s"], rel_tol=1e-9), (name, fw)
