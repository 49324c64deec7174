"""Issue 31, "two paths that price the same plan must give the same number": ``estimate`` (the command and the
Python API), ``sweep`` and ``search`` build the system they price plans on through one function,
cost.frameworks.run_specs (the system, then the framework profile, then the --set values), and only the
search then keeps its memory headroom (search.setup.search_specs)."""

from __future__ import annotations

import json

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cli import main
from paraplan.cli.estimate_plan import set_overrides
from paraplan.cost.frameworks import run_specs

GIB = 2**30
# torchtitan: a stack that runs tp and pp (llm-foundry, with the same reserve, runs data parallelism only)
MODEL, SYSTEM, FRAMEWORK = "llama2-7b", "dgx-h100-80gb", "torchtitan"
# the capacity tells the order apart: the profile's reserve takes a share of the HBM it is given
SETS = ["accelerator.hbm_capacity=96GiB"]
PLAN = {"gpus": 8, "tp": 2, "zero": 1, "global_batch": 16, "seq_length": 2048}


def _expected():
    """By hand: torchtitan reserves 0.5 GiB of CUDA context + 1.0 GiB of NCCL buffers + 5 % of the 80 GiB
    it is applied to = 5.5 GiB; the --set capacity comes after it (96 GiB, the reserve stays 5.5 GiB; the
    other order would give 0.5 + 1.0 + 0.05 x 96 = 6.3 GiB)."""
    model, system = load_model(MODEL), load_system(SYSTEM)
    model, system = run_specs(model, system, load_framework(FRAMEWORK), set_overrides(SETS))
    assert system.accelerator.hbm_capacity == 96 * GIB
    assert system.accelerator.reserved_memory == pytest.approx(5.5 * GIB, rel=1e-12)
    return model, system


def test_the_search_and_the_sweep_build_the_estimates_system():
    from paraplan.search.setup import search_setup
    from paraplan.sweep.params import parse_set
    from paraplan.sweep.run import SweepConfig, prepare

    model, system = _expected()
    problem, full = search_setup(
        load_model(MODEL),
        load_system(SYSTEM),
        8,
        FRAMEWORK,
        memory_headroom=0.0,
        overrides=set_overrides(SETS),
        seq_length=2048,
        global_batch=16,
    )
    assert full == 96 * GIB
    assert problem.system.model_dump() == system.model_dump()
    assert problem.model.model_dump() == model.model_dump()
    config = SweepConfig(
        model=MODEL,
        systems=(SYSTEM,),
        gpus=(8,),
        seq_length=2048,
        global_batch=16,
        sets=tuple(parse_set(s) for s in SETS),
        framework=FRAMEWORK,
    )
    (task,) = prepare(config).tasks
    assert task["system"] == system.model_dump()
    assert task["model"] == model.model_dump()


def test_the_estimate_command_and_the_api_price_one_plan_alike(capsys):
    from paraplan import api

    model, system = _expected()
    options = [f"--{k.replace('_', '-')}={v}" for k, v in PLAN.items()]
    with pytest.raises(SystemExit) as exc:
        main(
            ["estimate", "-m", MODEL, "-s", SYSTEM, *options, "--framework", FRAMEWORK, "--json"]
            + [arg for s in SETS for arg in ("--set", s)]
        )
    out, err = capsys.readouterr()
    assert (exc.value.code or 0) == 0, err
    cli = json.loads(out)
    from paraplan.cost.frameworks import framework_plan_fields

    # the specs of run_specs, the profile's plan defaults (the profile is applied to the system once)
    est = api.estimate(model, system, framework_plan_fields(load_framework(FRAMEWORK), PLAN))
    assert cli["step_time_s"] == est.step_time_s
    assert cli["memory"]["capacity_gib"] == pytest.approx(96.0, rel=1e-12)
    assert cli["memory"]["peak_gib"] == pytest.approx(
        est.to_dict()["memory"]["peak_gib"], rel=1e-12
    )
    # the API's framework path is the same function (no --set there)
    _, profiled = run_specs(load_model(MODEL), load_system(SYSTEM), load_framework(FRAMEWORK))
    _, api_system, _ = api._problem(MODEL, SYSTEM, None, FRAMEWORK, dict(PLAN))
    assert api_system.model_dump() == profiled.model_dump()


def _estimate_json(capsys, *args) -> dict:
    with pytest.raises(SystemExit) as exc:
        main(
            ["estimate", "-m", "gpt3-2.7b", "-s", SYSTEM, "--framework", FRAMEWORK, "--json", *args]
        )
    out, err = capsys.readouterr()
    assert (exc.value.code or 0) == 0, err
    return json.loads(out)


def test_a_per_stage_plan_takes_the_profile_then_set_as_its_uniform_form(capsys, tmp_path):
    """gpt3-2.7b, pp 2 dp 4 ZeRO-1 on 8 H100s under torchtitan with --set hbm 96 GiB: the uniform plan and
    its per-stage form (estimate --plan, cost.frameworks.cluster_specs) give one step time and, per stage,
    one peak and capacity (the reserve 5.5 GiB of the profile on 80 GiB; --set was ignored on this path)."""
    from paraplan.cost.frameworks import framework_plan_fields
    from paraplan.specs.plan_fields import plan_from_fields
    from paraplan.specs.uniform_stages import uniform_stage_plan

    fields = {"gpus": 8, "pp": 2, "zero": 1, "global_batch": 16, "seq_length": 2048}
    plan = plan_from_fields(framework_plan_fields(load_framework(FRAMEWORK), fields))
    staged = uniform_stage_plan(plan, load_model("gpt3-2.7b"), SYSTEM)
    path = tmp_path / "stages.json"
    path.write_text(json.dumps(staged.model_dump(mode="json", exclude_none=True)))
    sets = [arg for s in SETS for arg in ("--set", s)]
    options = [f"--{k.replace('_', '-')}={v}" for k, v in fields.items()]
    uniform = _estimate_json(capsys, *options, *sets)
    per_stage = _estimate_json(capsys, "--plan", str(path), *sets)
    assert per_stage["step_time_s"] == pytest.approx(uniform["step_time_s"], rel=1e-9)
    for one, other in zip(per_stage["stages"], uniform["memory"]["per_stage"], strict=True):
        assert one["capacity_gib"] == other["capacity_gib"] == pytest.approx(96.0, rel=1e-12)
        assert one["reserved_gib"] == pytest.approx(5.5, rel=1e-12)
        assert one["peak_gib"] == pytest.approx(other["peak_gib"], rel=1e-9)
