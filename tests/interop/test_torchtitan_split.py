"""torchtitan's uneven pipeline stages (export.torchtitan_split): any split but the even default is
written as parallelism.module_fqns_per_model_part (torchtitan v0.2.2 pipeline_parallel.py), read back as
the plan's explicit stage_layers with the same step time; a hand-made split is refused by name."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import tomllib

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cli import main
from paraplan.cost.frameworks import framework_system
from paraplan.export import ExportRefused, export_plan, import_plan
from paraplan.export.common import canonical_plan
from paraplan.export.megatron_core import layout_from_stage_layers
from paraplan.export.torchtitan_split import written_plan
from paraplan.specs.plan import PlanSpec
from paraplan.step.estimate import estimate

MODEL, SYSTEM = load_model("gpt3-13b"), load_system("dgx-a100-80gb")  # 40 layers
BASE = dict(gpus=64, tp=8, zero=3, global_batch=64, micro_batch=1, seq_length=2048)
BASE |= dict(sequence_parallel=True, overlap_dp_grad_reduce=True, overlap_param_gather=True)


def _parts(text: str) -> list[list[str]] | None:
    return tomllib.loads(text)["parallelism"].get("module_fqns_per_model_part")


@pytest.mark.parametrize(
    "fields, stages, vpp",
    [
        (dict(pp=4, layers_first_stage=9, layers_last_stage=9), (9, 11, 11, 9), 1),
        (dict(pp=4, embedding_as_layer=True, loss_as_layer=True), (9, 11, 11, 9), 1),
        (dict(pp=4, stage_layers=(12, 10, 10, 8)), (12, 10, 10, 8), 1),
        (dict(pp=8, gpus=64, tp=4, zero=2), (5,) * 8, 1),
        (dict(pp=4, vpp=3, schedule="interleaved"), (10, 10, 10, 10), 3),
        (dict(pp=4, vpp=2, schedule="interleaved", layers_last_stage=8), (10, 11, 11, 8), 2),
    ],
)
def test_an_uneven_split_is_written_as_model_parts_and_read_back(fields, stages, vpp):
    plan = PlanSpec(**(BASE | fields))
    text = export_plan("torchtitan", plan, MODEL)
    parts = _parts(text)
    if fields.get("pp") == 8:  # the even default keeps layers_per_stage (40 layers = 8 × 5)
        assert parts is None and "pipeline_parallel_layers_per_stage = 5" in text
        return
    assert len(parts) == plan.pp * vpp
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
    layers = [n for p in parts for n in p if n.startswith("layers.")]
    assert layers == [f"layers.{i}" for i in range(MODEL.layers)]
    # part v·pp + s is chunk v of stage s (torchtitan's looped stage indices)
    per_stage = [
        sum(len([n for n in parts[v * plan.pp + s] if "layers." in n]) for v in range(vpp))
        for s in range(plan.pp)
    ]
    assert tuple(per_stage) == stages
    back = PlanSpec(**import_plan("torchtitan", text, MODEL, plan.seq_length))
    assert back.stage_layers == stages and back.vpp == vpp
    assert canonical_plan(back) == canonical_plan(written_plan(plan, MODEL))
    assert math.isclose(
        estimate(MODEL, SYSTEM, back).step_time_s,
        estimate(MODEL, SYSTEM, plan).step_time_s,
        rel_tol=1e-9,
    )


def test_a_split_needs_the_model_and_a_hand_made_split_is_refused():
    plan = PlanSpec(**(BASE | dict(pp=4, layers_first_stage=9, layers_last_stage=9)))
    with pytest.raises(ExportRefused, match=r"^plan\.stage_layers: .*--model"):
        export_plan("torchtitan", plan)
    text = export_plan("torchtitan", plan, MODEL)
    swapped = text.replace('"layers.0", "layers.1"', '"layers.1", "layers.0"')
    with pytest.raises(ExportRefused, match="hand-made split"):
        import_plan("torchtitan", swapped, MODEL)
    three = text.replace('["layers.31"', '["layers.31"').replace(
        "pipeline_parallel_degree = 4", "pipeline_parallel_degree = 3"
    )
    with pytest.raises(ExportRefused, match="do not divide over pp=3"):
        import_plan("torchtitan", three, MODEL)


def test_a_middle_part_without_layers_is_not_written_the_last_may_hold_norm_and_output_alone():
    """A part needs a module (specs.rules.model_parts_rule): a middle stage with fewer layers than
    its chunks is refused; a last stage with one layer fewer leaves its last part norm and output,
    as torchtitan's generate_llm_fqn_per_model_part writes it (pipeline_parallel.py:333)."""
    interleaved = BASE | dict(pp=4, vpp=4, schedule="interleaved")
    plan = PlanSpec(**(interleaved | dict(stage_layers=(13, 12, 3, 12))))
    with pytest.raises(ExportRefused, match=r"^plan\.vpp=4: .*without layers"):
        export_plan("torchtitan", plan, MODEL)
    plan = PlanSpec(**(interleaved | dict(stage_layers=(13, 12, 12, 3))))
    text = export_plan("torchtitan", plan, MODEL)
    assert _parts(text)[-1] == ["norm", "output"]
    back = PlanSpec(**import_plan("torchtitan", text, MODEL, plan.seq_length))
    assert canonical_plan(back) == canonical_plan(plan)
    empty = text.replace('["norm", "output"]', '[], ["norm", "output"]')
    with pytest.raises(ExportRefused, match="without modules|do not divide"):
        import_plan("torchtitan", empty, MODEL)


def _stages(plan: PlanSpec) -> list[int]:
    from paraplan.specs.split import stage_layer_counts

    return stage_layer_counts(plan.split(MODEL.layers, MODEL.mtp_layers))


def _layout_chunks(plan: PlanSpec, model) -> list[int]:
    """Decoder layers per chunk of Megatron-LM's layout for the plan (export.megatron_core)."""
    from paraplan.specs.split import accounted_units, stage_layer_counts

    units = accounted_units(plan.embedding_units, plan.loss_units, model.mtp_layers)
    stages = tuple(stage_layer_counts(plan.split(model.layers, model.mtp_layers)))
    layout = layout_from_stage_layers(stages, plan.vpp, *units, mtp_layers=model.mtp_layers)
    return [sum(int(n) for n in re.findall(r"t\*(\d+)", c)) for c in layout.split("|")]


@pytest.mark.parametrize(
    "fields",
    [
        dict(embedding_as_layer=True, loss_as_layer=True),
        dict(embedding_as_layer=True),
        dict(loss_as_layer=True),
    ],
)
def test_an_accounted_interleaved_split_writes_megatrons_chunks_and_reads_back_the_plan(fields):
    """The embedding / loss counted in the first / last chunk, as Megatron-LM's layout places them
    (40 layers + E + L over 4 stages × 2 chunks: 'Et*4|t*6|t*6|t*5|t*5|t*5|t*5|t*4L'), not the
    unaccounted cut (the first part 5 layers): the import gives back the plan, switches and all."""
    plan = PlanSpec(**(BASE | dict(pp=4, vpp=2, schedule="interleaved") | fields))
    text = export_plan("torchtitan", plan, MODEL)
    counts = [len([n for n in p if n.startswith("layers.")]) for p in _parts(text)]
    assert counts == _layout_chunks(plan, MODEL)
    if plan.embedding_as_layer:
        assert counts[0] == 4 and counts[1] == 6
    back = PlanSpec(**import_plan("torchtitan", text, MODEL, plan.seq_length))
    assert canonical_plan(back) == canonical_plan(written_plan(plan, MODEL))
    assert _stages(back) == _stages(plan) and _layout_chunks(back, MODEL) == counts
    if plan.embedding_as_layer and plan.loss_as_layer:  # the search's accounting reads back as is
        assert canonical_plan(back) == canonical_plan(plan)
    assert estimate(MODEL, SYSTEM, back).step_time_s == estimate(MODEL, SYSTEM, plan).step_time_s


def test_a_torchtitan_search_with_vpp_round_trips_through_the_chunks_it_priced():
    """search --framework torchtitan (vpp > 1, the embedding and loss counted in the split) ->
    export -> import -> estimate: the same plan and step time (relative 1e-9), and the parts are the
    chunks of Megatron-LM's layout of the plan (specs.split.model_part_layers)."""
    args = "search -m gpt3-13b -s dgx-a100-80gb --gpus 48 --seq-length 2048 --global-batch 48"
    args += (
        " --schedule interleaved --framework torchtitan --pp 3 --tp 8 --vary-split --top 6 --json"
    )
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit) as exc:
        main(args.split())
    assert (exc.value.code or 0) == 0
    rows = json.loads(buf.getvalue())["plans"]
    assert any(r["plan"]["vpp"] > 1 and r["plan"].get("embedding_as_layer") for r in rows)
    system = framework_system(load_framework("torchtitan"), SYSTEM)
    same = 0
    for row in rows:
        plan = PlanSpec(**row["plan"])
        text = export_plan("torchtitan", plan, MODEL)
        counts = [len([n for n in p if n.startswith("layers.")]) for p in _parts(text)]
        assert counts == _layout_chunks(plan, MODEL)
        back = PlanSpec(**import_plan("torchtitan", text, MODEL, plan.seq_length))
        assert canonical_plan(back) == canonical_plan(written_plan(plan, MODEL))
        assert _stages(back) == _stages(plan) and _layout_chunks(back, MODEL) == counts
        same += canonical_plan(back) == canonical_plan(plan)
        est = estimate(MODEL, system, back).step_time_s
        assert math.isclose(est, row["step_time_s"], rel_tol=1e-9)
    assert same == len(rows)  # every row's accounting reads back as the search wrote it


def test_chunks_in_model_order_and_back_to_stages():
    """Chunk v of stage s sits at v·pp + s (both exporters' order); summing by stage inverts it."""
    from paraplan.export.megatron_core import chunks_in_model_order, stages_of_chunks

    per_stage = [[3, 2], [2, 2], [1, 1]]  # pp 3, vpp 2
    assert chunks_in_model_order(per_stage) == [3, 2, 1, 2, 2, 1]
    assert stages_of_chunks(chunks_in_model_order(per_stage), 3) == (5, 4, 2)
    assert chunks_in_model_order([]) == []
