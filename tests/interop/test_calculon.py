"""Calculon's shipped inputs import, estimate, and refuse what has no paraplan form (issue 11)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from paraplan.api import plan_from_fields
from paraplan.catalog import load_model, load_system
from paraplan.cli import main
from paraplan.step.estimate import estimate
from paraplan.importers.calculon import _ramp_s, convert, convert_system
from paraplan.specs.errors import InputError

CALC = Path(__file__).resolve().parents[1] / "data" / "calculon"
SYSTEMS = sorted((CALC / "systems").glob("*.json"))
MODELS = sorted((CALC / "models").glob("*.json"))
EXECUTIONS = sorted((CALC / "validation").rglob("*.json"))


@pytest.mark.parametrize("system", SYSTEMS, ids=lambda p: p.stem)
def test_every_shipped_system_converts(system):
    notes: list[str] = []
    spec = load_system(convert_system(json.loads(system.read_text()), system.stem, notes))
    assert spec.node.gpus_per_domain == 8
    assert spec.accelerator.efficiency.gemm == pytest.approx(
        max(e for _, e in json.loads(system.read_text())["matrix"]["float16"]["gflops_efficiency"])
    )
    assert any("sm_count" in n for n in notes)


def test_every_model_and_execution_imports_and_estimates():
    """All 13 models with the a100_80g system and a Table-5 execution; every execution with its model."""
    system = CALC / "systems" / "a100_80g.json"
    execution = CALC / "validation" / "seqsel" / "tab5" / "gpt3-175B_full.json"
    for model in MODELS:
        conv = convert(model, system, execution)
        assert load_model(conv.model).layers == json.loads(model.read_text())["num_blocks"]
    for ex in EXECUTIONS:
        conv = convert(CALC / "models" / f"{ex.stem.rsplit('_', 1)[0]}.json", system, ex)
        est = estimate(
            load_model(conv.model), load_system(conv.system), plan_from_fields(conv.plan)
        )
        assert 0 < est.mfu < 1 and est.step_time_s > 0


def test_a100_conversion_values():
    """Units: bandwidth GB/s -> bytes/s (1e9), GiB -> 2^30; efficiencies and processor usage carried."""
    conv = convert(
        CALC / "models" / "gpt3-175B.json",
        CALC / "systems" / "a100_80g.json",
        CALC / "validation" / "seqsel" / "tab5" / "gpt3-175B_seqsel.json",
    )
    s = load_system(conv.system)
    assert s.node.nvlink_bandwidth == 300e9 and s.network.nic_bandwidth == 25e9
    assert s.accelerator.hbm_capacity == 80 * 2**30 and s.accelerator.hbm_bandwidth == 2048e9
    assert (s.node.nvlink_efficiency, s.network.efficiency) == (0.65, 0.9)
    assert (s.node.nvlink_overlap_cost, s.network.overlap_cost) == (0.15, 0.02)
    plan = plan_from_fields(conv.plan)
    assert (plan.tp, plan.pp, plan.dp, plan.vpp, plan.recompute, plan.sequence_parallel) == (
        8,
        8,
        1,
        3,
        "selective",
        True,
    )
    assert any("1.5·(n-1)/n" in n for n in conv.notes)  # rs/ag factor not representable: stated


def test_ramp_reproduces_a_one_point_curve():
    """One point at F: e = F/(F + R·cap·t) -> t = F/R·(1/e − 1/cap)."""
    peak, cap = 312e12, 0.95
    t = _ramp_s([[1, 0.6], [0, 0.1]], peak, cap)
    assert t == pytest.approx(1e9 / peak * (1 / 0.6 - 1 / cap))


def test_three_network_tiers_are_refused(tmp_path):
    data = json.loads((CALC / "systems" / "a100_80g.json").read_text())
    data["networks"].append(data["networks"][1])
    with pytest.raises(InputError, match="networks has 3 tiers"):
        convert_system(data, "x", [])


def test_inference_execution_is_refused(tmp_path):
    data = json.loads((CALC / "examples" / "3072_t4_p64_d12_mbs4_full.json").read_text())
    data["training"] = False
    path = tmp_path / "ex.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match="inference"):
        convert(CALC / "models" / "megatron-1T.json", CALC / "systems" / "a100_80g.json", path)


def test_import_calculon_cli_writes_inputs_estimate_reads(tmp_path, capsys):
    args = [
        "import",
        "calculon",
        str(CALC / "models" / "megatron-22B.json"),
        str(CALC / "systems" / "a100_80g.json"),
        str(CALC / "validation" / "seqsel" / "tab5" / "megatron-22B_full.json"),
        "--out",
        str(tmp_path),
    ]
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code in (0, None)
    assert "note: model: Calculon has no vocabulary" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "estimate",
                "-m",
                str(tmp_path / "model.yaml"),
                "-s",
                str(tmp_path / "system.yaml"),
                "--plan",
                str(tmp_path / "plan.json"),
                "--json",
            ]
        )
    out = json.loads(capsys.readouterr().out)
    assert out["plan"]["tp"] == 8 and out["plan"]["recompute"] == "full"
