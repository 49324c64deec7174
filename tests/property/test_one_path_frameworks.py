"""One step, one path (issue 31), under every framework profile of the catalog: a uniform plan priced by the
uniform estimator and the same plan restated as a per-stage plan (specs.uniform_stages.uniform_stage_plan →
step.per_stage) give the same step time, breakdown and memory per stage (peak, activations, weights,
gradients, optimizer state, buffers; relative 1e-9: tests/unit/test_one_path.assert_same), for every profile
(cost.frameworks.apply_framework: its system — attention kernel, eager kernels and composite modules
(graph.eager_modules: gelu_new, LlamaRMSNorm, rotate_half, fp32-logit loss), runtime copies and transfers,
optimizer state — and its plan defaults: gradient dtype, fp8 weight copies, ZeRO-3 units and prefetch,
overlap switches) and every datatype of bf16 / fp16 / fp8 / fp32 the system has a peak for, the plan stating its gradient dtype
(fp32 / bf16) half the time, and a DeepSpeed profile's plan restated on DeepSpeed's PipelineEngine (its
pipeline_engine, as production restates it: tests/unit/test_one_path.both_paths).

Plans are drawn with a fixed seed per (profile, datatype): a dense model the per-stage path takes (decoders
with GeLU or SwiGLU, LayerNorm or RMSNorm, learned or rotary positions, tied or untied embeddings; BERT and
ViT encoders), a plan of tests/unit/test_one_path.draw_plan_fields (pp ≤ 8, tp ≤ 8, cp ≤ 4, dp ≤ 8 on ≤ 32 GPUs, ZeRO 0-3, every
recompute mode, 1F1B / GPipe / interleaved, sequence parallelism) on a system with a peak for the datatype,
under a profile whose stack runs a recomputation mode of its own (specs.recompute.MODES: torchtitan's op_sac,
MaxText's save_dots) that mode half the time, and now and then an overlap switch the plan states against
the profile (overlap_dp_grad_reduce too under the DeepSpeed profiles: at pp = 1 both paths honour it, with
pp > 1 both refuse it, specs.rules_stack.engine_dp_overlap_rule). A plan the uniform
path refuses is drawn again. The quick test checks a few plans per pair, the slow one many.
"""

from __future__ import annotations

import functools
import json
import random
import zlib

import pytest
import yaml

from paraplan.catalog import (
    framework_names,
    framework_stack,
    load_framework,
    load_model,
    load_system,
)
from paraplan.cost.frameworks import framework_system
from paraplan.specs.cluster import uniform_cluster
from paraplan.specs.errors import InputError
from paraplan.specs.plan import PlanSpec
from paraplan.specs.recompute import MODES, offered_modes
from paraplan.specs.rules_precision import accelerator_rules
from paraplan.specs.stage_plan import StagePlanSpec, stage_plan_to_dict
from paraplan.specs.uniform_stages import uniform_stage_plan
from paraplan.step.constants import batch_sync_s
from paraplan.step.per_stage import estimate_stage_plan
from tests.unit.test_one_path import assert_same, both_paths, draw_plan_fields

REL = 1e-9
DTYPES = ("bf16", "fp16", "fp8", "fp32")
SYSTEMS = ("dgx-h100-80gb", "dgx-a100-80gb", "dgx-b200", "h100-pcie-8", "mi300x-8")
MODELS = (
    "gpt3-125m",
    "gpt3-350m",
    "gpt3-760m",
    "gpt3-1.3b",
    "llama2-7b",
    "llama3-8b",
    "bert-large",
    "vit-large",
)
OVERLAPS = ("overlap_tp_comm", "overlap_param_gather", "overlap_dp_grad_reduce")
GRAD_DTYPES = ("fp32", "bf16")  # a plan's stated grad_dtype (specs.rules_stack.runs_bf16_optimizer)
TRIES = 40  # draws per plan before a pair counts as not allowed


def dtype_systems(dtype: str) -> list[str]:
    """The systems of SYSTEMS whose accelerator has a peak for ``dtype`` (specs.rules_precision.accelerator_rules)."""
    return [
        s
        for s in SYSTEMS
        if not accelerator_rules(load_system(s).accelerator, dtype, "flash")
        and not accelerator_rules(load_system(s).accelerator, dtype, "unfused")
    ]


def draw_plan(rng: random.Random, dtype: str, framework: str) -> tuple[str, str, dict]:
    """(model, system, plan fields) of one uniform plan (module docstring); the profile fills the rest."""
    name = rng.choice(MODELS)
    fields = draw_plan_fields(rng.choice, load_model(name)) | {"dtype": dtype}
    own = [MODES[n] for n in offered_modes(framework_stack(framework)) if MODES[n].stacks]
    if own and rng.random() < 0.5:  # the stack's own recomputation mode (the search varies it too)
        mode = rng.choice(own)
        fields |= {"recompute": mode.recompute, "recompute_modules": list(mode.modules)}
    for switch in OVERLAPS:  # the plan's own value wins over the profile's default
        if rng.random() < 0.2:
            fields[switch] = rng.random() < 0.5
    if (
        rng.random() < 0.5
    ):  # the gradient dtype the plan states against the profile's (its BF16_Optimizer)
        fields["grad_dtype"] = rng.choice(GRAD_DTYPES)
    return (
        name,
        rng.choice(dtype_systems(dtype)),
        runnable(fields, load_framework(framework).parallelism),
    )


def runnable(fields: dict, runs: tuple[str, ...]) -> dict:
    """The drawn plan on the parallel kinds the profile's loop runs (its ``parallelism``, refused otherwise:
    specs.rules_stack.stack_parallelism_rules): the GPUs of a tp, cp or pp it lacks become data-parallel
    replicas (the micro-batch count kept), or are dropped where it runs no data parallelism either (a
    one-device loop: gpus = tp·cp·pp), with no sequence parallelism or TP overlap it lacks, one stage under
    1F1B."""
    out = dict(fields)
    if "tp" not in runs:
        out["tp"] = 1
    if "cp" not in runs:
        out["cp"] = 1
    if "pp" not in runs:
        out |= {"pp": 1, "vpp": 1, "schedule": "1f1b"}
    if "dp" not in runs:
        out["gpus"] = out["tp"] * out["cp"] * out["pp"]
    replicas = fields["gpus"] // (fields["tp"] * fields["cp"] * fields["pp"])
    out["global_batch"] = (
        fields["global_batch"] // replicas * (out["gpus"] // (out["tp"] * out["cp"] * out["pp"]))
    )
    if "sp" not in runs or out["tp"] == 1:
        out["sequence_parallel"] = False
    if "tp_overlap" not in runs and "overlap_tp_comm" in out:
        out["overlap_tp_comm"] = False
    return out


@functools.cache
def _draws(framework: str, dtype: str) -> dict:
    """The pair's draw stream, kept per process: its generator, the draws and checks made so far and the
    first failure. ``check_pair(f, d, 10)`` checks the first 10 plans of the stream ``check_pair(f, d, 40)``
    checks, so the slow test goes on from where the quick one stopped (each plan priced once per process)
    instead of pricing those 10 again; a failure is kept and raised again for every later call."""
    return {
        "rng": random.Random(zlib.crc32(f"{framework}/{dtype}".encode())),
        "tries": 0,
        "checked": 0,
        "failure": None,
    }


def check_pair(framework: str, dtype: str, plans: int) -> int:
    """Draw ``plans`` plans the uniform path takes under the profile and datatype and check both paths
    agree on each (at most ``plans * TRIES`` draws in all); returns how many were checked. The stream
    is the pair's (``_draws``): the plans already checked in this process are not priced again."""
    state = _draws(framework, dtype)
    if state["failure"] is not None:
        raise state["failure"]
    rng = state["rng"]
    while state["checked"] < plans and state["tries"] < plans * TRIES:
        state["tries"] += 1
        name, system, fields = draw_plan(rng, dtype, framework)
        try:
            uniform, per_stage = both_paths(name, system, framework, **fields)
        except InputError:
            continue  # a plan the uniform path refuses (a rule of the model or the system): draw again
        try:
            assert_same(uniform, per_stage)
        except AssertionError as err:
            state["failure"] = AssertionError(
                f"{framework} {dtype} {name} on {system}, {fields}: {err}"
            )
            raise state["failure"] from err
        state["checked"] += 1
    return min(state["checked"], plans)


# each pair in its own xdist group: its quick and slow tests run on one worker, which draws and prices
# the first 10 plans once (``_draws``)
PAIRS = [
    pytest.param(f, d, id=f"{f}-{d}", marks=pytest.mark.xdist_group(f"one-path-{f}-{d}"))
    for f in framework_names()
    for d in DTYPES
    if dtype_systems(d)
]


def test_every_profile_and_datatype_is_drawn():
    """Every catalog profile and each of bf16 / fp16 / fp8 / fp32 (the test would pass on nothing otherwise)."""
    assert {p.values[0] for p in PAIRS} == set(framework_names())
    assert len(framework_names()) >= 10
    assert {p.values[1] for p in PAIRS} == set(DTYPES)


@pytest.mark.parametrize("framework, dtype", PAIRS)
def test_both_paths_agree_under_every_profile(framework, dtype):
    assert check_pair(framework, dtype, 10) == 10


@pytest.mark.slow
@pytest.mark.parametrize("framework, dtype", PAIRS)
def test_both_paths_agree_under_every_profile_many_plans(framework, dtype):
    assert check_pair(framework, dtype, 40) == 40


@pytest.mark.parametrize(
    "framework, model, activations_gb",
    [
        ("pytorch-eager", "gpt3-350m", 23.86558976),
        ("hf-transformers", "llama2-7b", None),  # LlamaRMSNorm, rotate_half, ACT2FN composites
        ("hf-transformers", "gpt3-350m", None),  # gelu_new
    ],
)
def test_eager_composites_reach_the_per_stage_path(framework, model, activations_gb):
    """The defect this test was written for: GPT-3 350M on one H100 under pytorch-eager kept 17.2 GB of
    activations on the per-stage path against 23.9 GB on the uniform one (the fp32-logit loss's 12 B per
    logit, graph.losses.LOGIT_BYTES, never reached the per-stage layer shape)."""
    uniform, per_stage = both_paths(
        model,
        framework=framework,
        gpus=1,
        global_batch=8,
        micro_batch=8,
        seq_length=2048,
    )
    assert_same(uniform, per_stage)
    if activations_gb is not None:
        assert per_stage.stages[0].activations_bytes / 1e9 == pytest.approx(
            activations_gb, rel=1e-9
        )


@pytest.mark.parametrize("framework", ["pytorch-eager", "hf-transformers", "pytorch-eager-bf16"])
def test_estimate_plan_file_takes_the_framework(cli, tmp_path, framework):
    """``paraplan estimate --plan STAGES --framework F`` prices the per-stage plan under the profile (its
    systems, and the plan defaults the file leaves unset) as ``estimate --framework F`` prices the uniform
    plan: the same step time and memory per stage (the profile was once ignored for a list of stages). These
    profiles' loops run no pipeline (their ``parallelism``): a two-stage plan is refused by both paths alike,
    and a one-stage plan of the kinds the loop runs is priced alike."""
    options = ["--model", "llama2-7b", "--system", "dgx-h100-80gb", "--framework", framework]
    model, system = load_model("llama2-7b"), load_system("dgx-h100-80gb")
    runs = load_framework(framework).parallelism
    tp = 2 if "tp" in runs else 1
    for pp in (2, 1):
        gpus = 8 if "dp" in runs else tp * pp  # a one-device loop: no data-parallel replicas
        plan = {"gpus": gpus, "tp": tp, "pp": pp, "global_batch": 16, "seq_length": 2048, "zero": 1}
        flags = [f"--{k.replace('_', '-')}={v}" for k, v in plan.items()]
        stages = uniform_stage_plan(
            PlanSpec(**plan), model, uniform_cluster(system, gpus).pools[0].name
        )
        path = tmp_path / "stages.yaml"
        path.write_text(yaml.safe_dump(stage_plan_to_dict(stages)))
        results = [
            cli("estimate", *options, *flags, "--json"),
            cli("estimate", *options, "--plan", str(path), "--json"),
        ]
        if pp == 2:
            # a one-device loop is refused its GPUs first (specs.rules_stack.stack_rules), the others the pipeline
            refusal = "plan.pp: 2 is not allowed" if "dp" in runs else "gpus: 2 is not allowed"
            for code, _, err in results:
                assert code == 2 and refusal in err, err
            continue
        for code, _, err in results:
            assert code in (0, 1), err
        uniform, per_stage = (json.loads(out) for _, out, _ in results)
        assert per_stage["step_time_s"] == pytest.approx(uniform["step_time_s"], rel=REL)
        assert len(per_stage["stages"]) == len(uniform["memory"]["per_stage"]) == 1
        for u, p in zip(uniform["memory"]["per_stage"], per_stage["stages"]):
            for key in (
                "peak_gib",
                "activations_gib",
                "weights_gib",
                "gradients_gib",
                "optimizer_gib",
            ):
                assert p[key] == pytest.approx(u[key], rel=REL), key


DEEPSPEED = load_framework("megatron-deepspeed")


def _batch_syncs(system, syncs: float):
    """``system`` with the stack's batch synchronisations (efficiency.runtime.batch_syncs) set to ``syncs``."""
    data = system.model_dump()
    data["accelerator"]["efficiency"]["runtime"]["batch_syncs"] = syncs
    return type(system).model_validate(data)


def test_deepspeed_engine_plans_price_the_batch_loads_as_the_uniform_path():
    """A per-stage plan on DeepSpeed's PipelineEngine (plan.engine = deepspeed) synchronises on each batch
    load of its first and last stage, as the uniform path prices the megatron-deepspeed profile's
    (step.compose.runtime_work, one rule: step.constants.batch_sync_s): the engine states it, so the plan
    prices the same whatever the stack's batch_syncs, and that is the stack's price of it. The defect this
    was written for: the per-stage path read the engine's transfers and accumulation but never its batch
    loads, so a DeepSpeed-engine plan on a stack without them (megatron-core) lost them. Seeded draws of
    dense decoders, pp 2-8, ZeRO 0-1 (specs.rules_stack.engine_zero_rule), 1F1B (engine_schedule_rule: the
    engine runs no other)."""
    rng = random.Random(31)
    checked = 0
    for _ in range(TRIES * 6):
        if checked == 6:
            break
        name = rng.choice(MODELS[:6])
        fields = draw_plan_fields(rng.choice, load_model(name))
        if (
            fields["pp"] == 1
            or fields.get("schedule", "1f1b") not in (None, "1f1b")
            or fields.get("vpp", 1) > 1
            or fields.get("zero", 0) > 1
        ):
            continue
        model = load_model(name)
        system = load_system(rng.choice(("dgx-h100-80gb", "dgx-a100-80gb")))
        system = framework_system(DEEPSPEED, system)  # its host latencies: the idle is not 0
        try:
            plan = PlanSpec(**fields)
        except (InputError, ValueError):
            continue
        cluster = uniform_cluster(system, plan.gpus)
        data = stage_plan_to_dict(uniform_stage_plan(plan, model, cluster.pools[0].name))
        # the DP overlap left unset: the value the engine and the pool's stack run (settled with the pools:
        # DeepSpeed's optimizers fall back at zero 0 on Megatron's engine too, issue 31)
        unset = {k: v for k, v in data.items() if k != "overlap_dp_grad_reduce"}
        stages = StagePlanSpec.model_validate(unset | {"engine": "deepspeed"})
        priced = []
        for syncs in (0.0, 1.0):
            on = uniform_cluster(_batch_syncs(system, syncs), plan.gpus)
            try:
                priced.append(estimate_stage_plan(model, on, stages))
            except InputError:
                break
        if len(priced) < 2:
            continue
        without, with_stack = priced
        assert without.step_time_s == pytest.approx(with_stack.step_time_s, rel=REL), (name, fields)
        assert without.breakdown.__dict__ == pytest.approx(with_stack.breakdown.__dict__, rel=REL)
        megatron = StagePlanSpec.model_validate(unset)
        bare = estimate_stage_plan(
            model, uniform_cluster(_batch_syncs(system, 0.0), plan.gpus), megatron
        )
        stack = estimate_stage_plan(
            model, uniform_cluster(_batch_syncs(system, 1.0), plan.gpus), megatron
        )
        # the loads are priced at all: the end stages' per-micro-batch work grows by the idle
        idle = batch_sync_s(system, 1.0)
        assert idle > 0.0
        for k in (0, -1):
            added = stack.stage_work_s[k] - bare.stage_work_s[k]
            assert added == pytest.approx(idle, rel=1e-6)
        checked += 1
    assert checked == 6
