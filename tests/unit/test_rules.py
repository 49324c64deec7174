"""Every plan rule of specs/rules.py and specs/rules_moe.py, each tested here once (issue 31: one home
for each rule).

Other tests check that the plan checks and the searches reach these rules (integration); what each rule
allows and refuses is stated here. The last tests keep the rules in one place."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import paraplan
from paraplan.catalog import load_model
from paraplan.specs import rules, rules_moe, rules_offload, rules_precision, rules_schedule
from paraplan.specs.model import ModelSpec
from paraplan.specs.moe_plan import MoEPlanFields
from paraplan.specs.parallel import ParallelDims
from paraplan.specs.plan import PlanSpec
from paraplan.specs.split import SplitGroup

# 32 query heads in 8 key/value groups, ffn 4·hidden; 16 layers
GQA = ModelSpec(
    layers=16, hidden=2048, heads=32, kv_heads=8, ffn_hidden=8192, vocab=32000, max_position=4096
)
MOE = load_model("qwen3-30b-a3b")


def _plan(**fields) -> PlanSpec:
    base = dict(gpus=8, global_batch=64, seq_length=2048)
    return PlanSpec(**(base | fields))


# ---- degrees -------------------------------------------------------------------------------------
def test_parallel_dims():
    dims = ParallelDims(tp=2, cp=2, dp=8, pp=4, ep=4, etp=2)
    assert (dims.world, dims.stage_gpus, dims.edp) == (128, 32, 4)
    assert _plan(tp=2, pp=2).dims == ParallelDims(tp=2, dp=2, pp=2)


@pytest.mark.parametrize(
    "gpus, dims, field, text",
    [
        (8, ParallelDims(tp=3), "plan.tp", "must divide gpus=8"),
        (8, ParallelDims(tp=2, cp=3), "plan.cp", "product 6"),
        (8, ParallelDims(tp=2, pp=8), "plan.pp", "product 16"),
        (8, ParallelDims(tp=2, dp=3), "plan.dp", "gpus/(tp·pp·cp) = 4"),
        (8, ParallelDims(tp=2, dp=0), "plan.gpus", "tp·pp·dp·cp = 2·1·?·1"),
    ],
)
def test_degree_violation_blames_the_first_degree_that_cannot_split(gpus, dims, field, text):
    violation = rules.degree_violation(gpus, dims)
    assert violation.field == field and text in violation.rule


def test_degree_rule():
    assert rules.degree_rule(8, ParallelDims(tp=2, dp=4)) is None
    assert rules.degree_rule(8, ParallelDims(tp=2, dp=2)).field == "plan.dp"
    assert rules.degree_rule(8, ParallelDims(tp=2, dp=0)).field == "plan.gpus"  # dp not given
    assert (
        rules.degree_rule(12, ParallelDims(tp=2, dp=1, pp=4)).field == "plan.pp"
    )  # 2·4 does not split 12


def test_even_share():
    assert rules.even_share(64, 8) == 8 and rules.even_share(64, 64) == 1
    assert rules.even_share(64, 6) == 0 and rules.even_share(3, 4) == 0


def test_stage_degree_rule():
    assert rules.stage_degree_rule(8, 2, 4) is None and rules.stage_degree_rule(8, 2, 0) is None
    assert "must equal the stage's GPUs = 8" in rules.stage_degree_rule(8, 2, 2)
    assert "tp=3 must divide the stage's GPUs = 8" in rules.stage_degree_rule(8, 3, 0)


# ---- tensor parallelism --------------------------------------------------------------------------
def test_tp_divides_heads_kv_heads_and_ffn_hidden():
    assert rules.tp_rules(GQA, 8) == []
    assert rules.tp_rules(GQA, 16) == ["must divide kv_heads=8"]  # 32 heads split, 8 groups do not
    assert rules.tp_rules(GQA, 3) == ["must divide heads=32", "must divide ffn_hidden=8192"]
    odd = GQA.model_copy(update={"ffn_hidden": 8190})
    assert rules.tp_rules(odd, 4) == ["must divide ffn_hidden=8190"]


def test_tp_rules_text_names_every_dimension_tp_rules_checks():
    assert rules.tp_rules_text(GQA) == "tp must divide heads=32, kv_heads=8 and ffn_hidden=8192"
    assert rules.tp_rules_text(GQA, (3, 8)) == (
        "tp=3 must divide heads=32 and must divide ffn_hidden=8192"
    )
    assert rules.tp_rules_text(GQA, (8,)) == rules.tp_rules_text(GQA)  # none refused: the sentence


def test_the_search_names_the_tp_rule_that_refuses_its_tp():
    """The search's "cannot be split" message gives tp_rules' own words for the --tp it was given (issue 31: it
    named heads and kv_heads only, while ffn_hidden refused the tp)."""
    from paraplan.catalog import load_system
    from paraplan.search.setup import search_problem
    from paraplan.specs.errors import InputError

    odd = GQA.model_copy(update={"ffn_hidden": 8190, "name": "odd-ffn"})
    args = (odd, load_system("dgx-h100-80gb"), 8)
    problem = search_problem(*args, seq_length=2048, global_batch=16, tp=(4,), pp=(1,), cp=(1,))
    with pytest.raises(InputError, match=r"\(tp=4 must divide ffn_hidden=8190; pp <= layers=16\)"):
        problem.check()


def test_pool_slice_rule():
    assert rules.pool_slice_rule(4, 2) is None
    assert "TP group stays in one pool" in rules.pool_slice_rule(3, 2)


def test_sequence_parallel_rule():
    assert rules.sequence_parallel_rule(2048, 2, 8) is None
    assert "tp=3" in rules.sequence_parallel_rule(2048, 1, 3)
    assert rules.sequence_parallel_rule(20, 2, 4) is not None  # 10 tokens per cp rank over 4


def test_local_sequence_rule():
    assert rules.local_sequence_rule(2048, 2, 4, "tp_rows") is None
    assert (
        rules.local_sequence_rule(2046, 1, 4, "tp_rows")
        == "seq_length/cp must be divisible by tp_rows=4"
    )
    assert rules.sequence_parallel_rule(2046, 1, 4) == (
        "seq_length/cp must be divisible by tp=4 with sequence_parallel"
    )


def test_layout_model_rule():
    assert rules.layout_model_rule(MOE, "1d") is None and rules.layout_model_rule(GQA, "2d") is None
    assert "dense" in rules.layout_model_rule(MOE, "2d-seq")


def test_grid_rules():
    assert rules.grid_rules(GQA, 16, 4, 2048, 1) == []
    assert rules.grid_rules(GQA, 8, 3, 2048, 1) == [("plan.tp_rows", 3, "must divide tp=8")]
    assert "at least 2 × 2" in rules.grid_rules(GQA, 8, 1, 2048, 1)[0][2]
    columns_16 = rules.grid_rules(GQA, 32, 2, 2048, 1)  # 16 columns: 8 kv groups do not split
    assert [r[2] for r in columns_16] == ["2d grid columns (16) must divide kv_heads=8"]
    assert rules.grid_rules(GQA, 16, 4, 2046, 1)[0][0] == "plan.seq_length"
    assert rules.grid_rules(GQA, 16, 4, 2048, 1, summa_panels=4096)[0][0] == "plan.summa_panels"


def test_tp_layout_violations():
    assert rules.tp_layout_violations(GQA, _plan(tp=8)) == []
    knob = rules.tp_layout_violations(GQA, _plan(tp=8, tp_rows=2))
    assert [(v.field, v.rule) for v in knob] == [("plan.tp_rows", "needs tp_layout=2d")]
    seq = rules.tp_layout_violations(GQA, _plan(tp=8, tp_layout="2d-seq"))
    assert [v.field for v in seq] == ["plan.cp"]
    grid = _plan(tp=4, tp_layout="2d", sequence_parallel=True, overlap_tp_comm=True)
    assert [v.field for v in rules.tp_layout_violations(GQA, grid)] == [
        "plan.sequence_parallel",
        "plan.overlap_tp_comm",
    ]
    moe = _plan(tp=4, tp_layout="2d")
    assert [v.field for v in rules.tp_layout_violations(MOE, moe)] == ["plan.tp_layout"]


# ---- context parallelism -------------------------------------------------------------------------
def test_cp_rule():
    assert rules.cp_rule(2048, 1) is None and rules.cp_rule(2048, 4) is None
    assert rules.cp_rule(2044, 4) == "must be divisible by 2·cp = 8"


def test_ulysses_rule():
    assert rules.ulysses_rule(GQA, 2, 4, "all-to-all") is None  # tp·cp = 8 divides 32 and 8
    assert rules.ulysses_rule(GQA, 4, 4, "ring") is None
    assert "kv_heads=8" in rules.ulysses_rule(GQA, 4, 4, "all-to-all")
    assert "tp_layout='1d'" in rules.ulysses_rule(GQA, 2, 2, "all-to-all", "2d-seq")


# ---- pipeline and batch --------------------------------------------------------------------------
def test_pp_rule():
    assert rules.pp_rule(GQA, 16) is None
    assert rules.pp_rule(GQA, 17) == "must not exceed layers=16"


def test_batch_rule():
    assert rules.batch_rule(64, 8, 4) is None
    assert rules.batch_rule(64, 8, 16) == "must be a multiple of dp·micro_batch = 8·16"
    assert (
        rules.batch_rule(48, 4, 8, "microbatches") == "must be a multiple of dp·microbatches = 4·8"
    )


def test_min_global_batch():
    assert rules.min_global_batch(8, 2, 4) == 16
    assert rules.min_global_batch(8, 2, 4, "interleaved") == 64
    assert rules.min_global_batch(8, 2, 4, "dualpipe") == 8 * 2 * 8  # m >= 2·pp
    assert rules.min_global_batch(8, 2, 1, "interleaved") == 16


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved", "gpipe", "zb-h1", "dualpipe"])
@pytest.mark.parametrize("pp", [2, 4, 8])
def test_each_schedules_smallest_count_is_the_smallest_its_batch_rule_accepts(schedule, pp):
    entry = rules_schedule.SCHEDULE_RULES[schedule]
    m = entry.min_count(pp)
    assert entry.batch_rule(pp, m) is None
    assert all(entry.batch_rule(pp, k) is not None for k in range(1, m))


def test_dualpipe_rule():
    """deepseek-ai/DualPipe's DualPipe.step asserts an even rank count and an even micro-batch
    count of at least 2·pp (dualpipe/dualpipe.py:332-333 at 3da1bbe)."""
    assert rules.dualpipe_rule(4, 8) is None and rules.dualpipe_rule(2, 4) is None
    assert rules.dualpipe_rule(3, 8) is not None and rules.dualpipe_rule(4, 7) is not None
    assert rules.dualpipe_rule(4, 6) == (
        "needs an even pp and an even micro-batch count of at least 2·pp = 8 "
        "(got pp=4, micro-batches=6)"
    )
    assert rules.dualpipe_rule(8, 8) is not None and rules.dualpipe_rule(2, 2) is not None


def test_vpp_rule():
    assert rules.vpp_rule(2, 4) is None and rules.vpp_rule(1, 1) is None
    assert rules.vpp_rule(1, 2) == "needs pp > 1"


def test_interleave_batch_rule():
    assert rules.interleave_batch_rule(8, 4) is None
    assert "multiple of pp=4" in rules.interleave_batch_rule(6, 4)


def test_interleave_split_rule():
    groups = (SplitGroup(0, 4, 4, 0, 0),)  # four stages of four layers
    assert rules.interleave_split_rule(groups, 2, 0, 0) is None
    assert "multiple of vpp=3" in rules.interleave_split_rule(groups, 3, 0, 0)
    with_embedding = (SplitGroup(0, 1, 4, 1, 0), SplitGroup(1, 3, 4, 0, 0))  # 5 units, then 4
    assert "(embedding / loss counted)" in rules.interleave_split_rule(with_embedding, 2, 1, 0)


def test_split_violations():
    assert rules.split_violations(_plan(pp=4, stage_layers=(4, 4, 4, 4)), GQA) == []
    short = rules.split_violations(_plan(pp=4, stage_layers=(4, 4, 8)), GQA)
    assert short[0].rule == "must list pp=4 stages"
    wrong_sum = rules.split_violations(_plan(pp=2, stage_layers=(4, 4)), GQA)
    assert "sum to layers=16" in wrong_sum[0].rule
    assert rules.split_violations(_plan(layers_first_stage=2), GQA)[0].rule == "needs pp > 1"
    empty = rules.split_violations(_plan(gpus=9, pp=3, layers_first_stage=16), GQA)
    assert "without layers" in empty[0].rule and empty[0].field == "plan.layers_first_stage"


# ---- mixture of experts --------------------------------------------------------------------------
def test_expert_degree_rules():
    assert rules_moe.expert_degree_rules(MOE, ParallelDims(tp=2, dp=16, ep=8, etp=2)) == []
    bad = rules_moe.expert_degree_rules(MOE, ParallelDims(tp=1, dp=4, ep=16))
    assert [r[2] for r in bad] == [
        "ep·etp = 16·1 must divide tp·cp·dp = 1·1·4 (expert groups are carved from them)"
    ]
    assert rules_moe.expert_degree_rules(MOE, ParallelDims(dp=128, ep=3))[0][2].startswith(
        "must divide experts="
    )


def test_expert_free_rule():
    assert rules_moe.expert_free_rule(GQA, 1) is None and rules_moe.expert_free_rule(MOE, 8) is None
    assert "mixture-of-experts" in rules_moe.expert_free_rule(GQA, 2)


def test_dispatcher_rule():
    assert rules_moe.dispatcher_rule("deepep", None) is None
    assert rules_moe.dispatcher_rule("alltoall", 1.0) is None
    assert "deepep" in rules_moe.dispatcher_rule("deepep", 1.0)


def test_moe_sequence_parallel_rule():
    assert rules_moe.moe_sequence_parallel_rule(MOE, 2, True) is None
    assert rules_moe.moe_sequence_parallel_rule(GQA, 2, False) is None
    assert "need sequence_parallel" in rules_moe.moe_sequence_parallel_rule(MOE, 2, False)


def test_moe_plan_violations():
    fields = MoEPlanFields(etp=2, recompute_modules=["moe_act"])
    assert rules_moe.moe_plan_violations(MOE, ParallelDims(tp=2, dp=16, ep=8, etp=2), fields) == []
    knobs = MoEPlanFields(capacity_factor=1.0, moe_dispatcher="deepep")
    bad = rules_moe.moe_plan_violations(MOE, ParallelDims(dp=4, ep=16), knobs)
    assert [v.field for v in bad] == ["plan.ep", "plan.capacity_factor"]
    dense = rules_moe.moe_plan_violations(GQA, ParallelDims(dp=8, ep=2), MoEPlanFields(etp=2))
    assert [v.field for v in dense] == ["plan.ep", "plan.etp"]
    mla = rules_moe.moe_plan_violations(
        MOE, ParallelDims(dp=8), MoEPlanFields(recompute_modules=["mla_up_proj"])
    )
    assert [v.rule for v in mla] == ["needs attention_type=mla"]


# ---- recomputation and per-stage plans -----------------------------------------------------------
def test_recompute_violations():
    assert rules.recompute_violations(_plan(recompute="full", recompute_num_layers=2), GQA) == []
    by_module = _plan(recompute="full", recompute_modules=["mlp"])
    assert rules.recompute_violations(by_module, GQA)[0].rule == "needs recompute=selective"
    layers = _plan(recompute="selective", recompute_num_layers=2)
    assert rules.recompute_violations(layers, GQA)[0].rule == "needs recompute=full"
    moe = _plan(recompute="full", recompute_num_layers=2)
    rule = rules.recompute_violations(moe, MOE)[0].rule
    assert "dense decoder layers only" in rule and "recompute by module (recompute_modules)" in rule


def test_stage_rules():
    ok = rules.stage_rules(GQA, 1, ParallelDims(tp=8, dp=2), (8, 8), 64, 4, 2048, True)
    assert ok == []
    broken = rules.stage_rules(GQA, 1, ParallelDims(tp=16, dp=1), (8, 8), 48, 32, 2040, True)
    slice_rule = "must be a multiple of tp=16 (a TP group stays in one pool)"
    assert [(field, rule) for field, _, rule in broken] == [
        ("plan.stages.1.tp", "must divide kv_heads=8"),
        ("plan.stages.1.devices.0.gpus", slice_rule),
        ("plan.stages.1.devices.1.gpus", slice_rule),
        ("plan.global_batch", "stage 1: must be a multiple of dp·microbatches = 1·32"),
        (
            "plan.seq_length",
            "stage 1: seq_length/cp must be divisible by tp=16 with sequence_parallel",
        ),
    ]
    quiet = rules.stage_rules(GQA, 0, ParallelDims(tp=4, dp=2), (8,), 64, 4, 2040, False)
    assert quiet == []  # sequence parallelism off: seq_length need not split over tp


def test_uniform_model_violations():
    """Decoder-only and encoder-only models take the uniform paths; an encoder-decoder (T5) and layers
    of differing widths are named, field by field."""
    assert rules.uniform_model_violations(GQA) == []
    t5 = rules.uniform_model_violations(load_model("t5-3b"))
    assert [(v.field, v.value) for v in t5] == [("model.architecture", "encoder_decoder")]
    assert "an encoder-decoder is costed stage by stage" in t5[0].rule
    widths = GQA.model_copy(update={"layer_widths": ({"count": 16},)})
    assert [(v.field, v.value, v.rule) for v in rules.uniform_model_violations(widths)] == [
        (
            "model.layer_widths",
            "given",
            "layers of differing widths need a per-stage plan (--plan FILE with stages)",
        )
    ]


def test_offload_rule():
    assert (
        rules_offload.offload_rule(False, None, None, "s") is None
    )  # nothing offloaded: no host needed
    assert rules_offload.offload_rule(True, 64e9, 512e9, "s") is None
    both = "system s declares no host_bandwidth / host_memory"
    assert rules_offload.offload_rule(True, None, None, "s") == both
    # a host link without host memory to hold the state, or the reverse, cannot offload either
    assert rules_offload.offload_rule(True, 64e9, None, "s") == "system s declares no host_memory"
    assert (
        rules_offload.offload_rule(True, None, 512e9, "s") == "system s declares no host_bandwidth"
    )
    assert rules_offload.offload_rule(True, 0.0, 512e9, "s") is not None


def test_offload_layers_rule():
    assert rules_offload.offload_layers_rule(None, False) is None
    assert rules_offload.offload_layers_rule(20, True) is None
    rule = "offload_activation_layers=20 needs offload_activations (--offload-activations)"
    assert rules_offload.offload_layers_rule(20, False) == rule


def test_pool_offload_violations():
    """Each pool's system asked once per distinct rule: two pools without a host, one with."""
    from paraplan.catalog import load_system

    bare = load_system("dgx-a100-80gb").model_copy(deep=True)
    acc = bare.accelerator.model_copy(update={"host_bandwidth": None, "host_memory": None})
    bare = bare.model_copy(update={"accelerator": acc, "name": "bare"})
    hosted = bare.model_copy(
        update={"accelerator": acc.model_copy(update={"host_bandwidth": 5e10, "host_memory": 1e12})}
    )
    rule = "system bare declares no host_bandwidth / host_memory"
    plan = PlanSpec(gpus=8, tp=8, global_batch=8, seq_length=2048, offload_optimizer=True)
    got = rules_offload.pool_offload_violations(plan, [bare, hosted, bare])
    assert [(v.field, v.value, v.rule) for v in got] == [("plan.offload", True, rule)]
    none = plan.model_copy(update={"offload_optimizer": False})
    assert rules_offload.pool_offload_violations(none, [bare]) == []
    assert rules_offload.pool_offload_violations(plan, [hosted]) == []


def test_torchtitan_sequence_rule():
    # tp·2·cp = 2·2·3 = 12: 4092 = 12·341 is allowed, 4096 = 12·341 + 4 is not
    assert rules.torchtitan_sequence_rule(4092, 2, 3) is None
    rule = "torchtitan needs seq_length divisible by tp·2·cp = 12"
    assert rules.torchtitan_sequence_rule(4096, 2, 3) == rule
    assert rules.torchtitan_sequence_rule(4096, 1, 1) is None  # 4096 = 2·2048


# ---- one home ------------------------------------------------------------------------------------
ROOT = Path(paraplan.__file__).parent
RULE_ATTRIBUTES = {"heads", "n_kv_heads", "kv_heads", "ffn_hidden"}


def _functions_and_divisibility(path: Path):
    tree = ast.parse(path.read_text())
    names = [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    mods = [
        n.left.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.BinOp)
        and isinstance(n.op, ast.Mod)
        and isinstance(n.left, ast.Attribute)
        and n.left.attr in RULE_ATTRIBUTES
    ]
    mods += [  # "tp divides the GPUs": specs.rules.stage_degree_rule / pool_slice_rule
        "... % tp"
        for n in ast.walk(tree)
        if isinstance(n, ast.BinOp)
        and isinstance(n.op, ast.Mod)
        and getattr(n.right, "id", getattr(n.right, "attr", None)) == "tp"
    ]
    return names, mods


# Degrees and counts a plan rule divides (issue 31: micro-batches % pp in the instruction order, global_batch % dp
# and (gpus // tp) % pp in the searches, (seq_length // cp) % rows in the layouts, n % p twice in the per-stage
# search); the layer split's remainder, an instruction order's pass indices and a rank's CP index are arithmetic.
DEGREES = {"pp", "dp", "cp", "vpp", "tp_rows", "p"}
COUNTS = ("microbatch", "global_batch", "seq_length")
ARITHMETIC = {
    "specs/split.py: units % pp",  # the default split's remainder (specs.split.default_first_last)
    "step/schedule_orders.py: k // pp % vpp",  # pass k's model chunk
    "step/schedule_orders.py: k % pp",  # pass k's micro-batch
    "search/divisors.py: n % p",  # trial division
    "step/stage_links.py: r % cp",  # rank r's CP index
}


def _degree_divisibility(path: Path) -> list[str]:
    """``x % d`` with d a plan degree (DEGREES) or x naming a plan count (COUNTS), unparsed."""
    return [
        ast.unparse(n)
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, ast.BinOp)
        and isinstance(n.op, ast.Mod)
        and (
            getattr(n.right, "id", getattr(n.right, "attr", None)) in DEGREES
            or any(word in ast.unparse(n.left) for word in COUNTS)
        )
    ]


def test_plan_rules_live_in_specs_rules_only():
    """No module but the rule modules (specs/rules.py, specs/rules_*.py) defines a ``*_rule`` /
    ``*_rules`` function, and none tests heads, kv_heads or ffn_hidden for divisibility (the model's own
    heads % kv_heads check is specs.model's), nor any count for divisibility by tp (issue 31: the
    per-stage searches wrote "tp divides the stage's GPUs" inline three times), nor by another degree, nor
    a micro-batch count, batch or sequence for divisibility (_degree_divisibility, ARITHMETIC aside)."""
    homes = {ROOT / "specs" / "rules.py", *(ROOT / "specs").glob("rules_*.py")}
    elsewhere = []
    for path in ROOT.rglob("*.py"):
        if path in homes:
            continue
        names, mods = _functions_and_divisibility(path)
        rel = path.relative_to(ROOT).as_posix()
        elsewhere += [f"{rel}:{n}" for n in names if n.endswith(("_rule", "_rules"))]
        elsewhere += [f"{rel}: {a} % ..." for a in mods if rel != "specs/model.py"]
        found = (f"{rel}: {expr}" for expr in _degree_divisibility(path))
        elsewhere += [f for f in found if f not in ARITHMETIC]
    assert elsewhere == []


def test_dtype_rule():
    from paraplan.catalog import load_system

    h100, b200 = (load_system(n).accelerator for n in ("dgx-h100-80gb", "dgx-b200"))
    assert (
        rules_precision.dtype_rule("tf32", h100) is None
        and rules_precision.dtype_rule("nvfp4", b200) is None
    )
    assert (
        "needs FP4 tensor cores with that format (NVIDIA Blackwell"
        in rules_precision.dtype_rule("mxfp4", h100)
    )
    mi355x = load_system("mi355x-8").accelerator
    assert rules_precision.dtype_rule("mxfp4", mi355x) is None
    assert "(NVIDIA Blackwell)" in rules_precision.dtype_rule("nvfp4", mi355x)
    v100 = load_system("dgx-1-v100").accelerator
    assert "has no peak for it" in rules_precision.dtype_rule("fp8", v100)


def test_kind_lists_are_read_off_the_block_kinds():
    """Issue 31: the search's layer kinds (search/table.py) and partial recomputation's kind
    (step/partial_recompute.py) were lists of their own; both read the registry now. A model whose MoE
    layers alternate with dense ones (interval 2, no leading dense layers) holds dense layers, which the
    old list left out of the search's per-row floor of layer work (a floor above its dense layers' work)."""
    from paraplan.catalog import load_model
    from paraplan.step.blocks import BLOCK_KINDS, COUNTED_RECOMPUTE_KINDS
    from paraplan.step.layout import model_layer_kinds

    assert COUNTED_RECOMPUTE_KINDS == {"decoder"}
    assert all(BLOCK_KINDS[k].layer and BLOCK_KINDS[k].recomputed for k in COUNTED_RECOMPUTE_KINDS)
    assert model_layer_kinds(load_model("gpt3-175b")) == ("decoder",)
    assert model_layer_kinds(load_model("deepseek-v3")) == ("dense_layer", "moe_layer")
    mixtral = load_model("mixtral-8x7b")
    assert model_layer_kinds(mixtral) == ("moe_layer",)
    alternating = mixtral.model_copy(update={"moe_layer_interval": 2})
    assert model_layer_kinds(alternating) == ("dense_layer", "moe_layer")


def test_deepspeed_cp_rule():
    assert rules.deepspeed_cp_rule(1) is None
    ring = "DeepSpeed has no ring context parallelism (Ulysses is head-parallel all-to-all)"
    assert rules.deepspeed_cp_rule(2) == ring
    assert rules.deepspeed_cp_rule(2, "ring") == ring
    assert rules.deepspeed_cp_rule(2, "all-to-all") is None  # Ulysses: DeepSpeed's own


def test_launcher_expert_rules():
    torchtitan_experts_rule = rules_moe.torchtitan_experts_rule
    deepspeed_experts_rule = rules_moe.deepspeed_experts_rule
    # dp·cp·tp = 4·1·2 = 8: ep 4 divides it, ep 3 does not; etp 2 or another dispatcher is refused
    assert torchtitan_experts_rule(8, 4, 1, "alltoall") is None
    mesh = "torchtitan's expert mesh needs ep dividing dp·cp·tp = 8"
    assert torchtitan_experts_rule(8, 3, 1, "alltoall") == mesh
    only = "torchtitan: etp 1 and the alltoall dispatcher only"
    assert torchtitan_experts_rule(8, 4, 2, "alltoall") == only
    assert torchtitan_experts_rule(8, 4, 1, "allgather") == only
    assert deepspeed_experts_rule(1, 1, "alltoall") is None
    for ep, etp, dispatcher in ((2, 1, "alltoall"), (1, 2, "alltoall"), (1, 1, "allgather")):
        assert deepspeed_experts_rule(ep, etp, dispatcher).startswith("DeepSpeed's config splits")
