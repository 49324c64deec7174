"""Measured hosts as an input (specs/host.py, catalog/hosts, cost/hosts.py): the catalog entries are the host.csv
rows they cite, the relative speed against hand-computed values, the system's host applied with the framework
profile, each case and `--set host=` naming a host (one-line error for an unknown one), and the property that a
slower host never makes a step faster."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from paraplan.catalog import host_names, load_framework, load_host, load_model, load_system
from paraplan.cost import host as H
from paraplan.cost import hosts as HS
from paraplan.cost.frameworks import framework_system
from paraplan.specs.errors import InputError
from paraplan.specs.host import HostSpec
from paraplan.step.estimate import estimate
from paraplan.sweep.params import apply_overrides, parse_set
from paraplan.validate.run import load_cases

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "src/paraplan/validate/cases"
MEASURED = {
    "h100-host-2026-11-27b": "h100-2026-11-27b",
    "h100-host-2026-11-27c": "h100-2026-11-27c",
}


def _host(name="x", scale=1.0, autograd=None, **dispatch):
    return HostSpec(
        name=name,
        source="test",
        cpu="test",
        dispatch_s={op: t * scale for op, t in dispatch.items()},
        autograd_node_s=None if autograd is None else autograd * scale,
    )


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_each_catalog_host_is_its_host_csv(name):
    rows = csv.DictReader(
        (ROOT / "benchmarks/gpu/measured" / MEASURED[name] / "host/host.csv").open()
    )
    us = {r["what"]: float(r["value_us"]) * 1e-6 for r in rows}
    host = load_host(name)
    assert host.dispatch_s == pytest.approx(
        {k[len("dispatch_") :]: v for k, v in us.items() if k.startswith("dispatch_")}, rel=1e-9
    )
    assert host.autograd_node_s == pytest.approx(us["autograd_node"], rel=1e-9)
    assert host.sync_s == pytest.approx(us["item_d2h"], rel=1e-9)
    assert host.graph_kernel_s == pytest.approx(us["graph_replay_host"] / 1000, rel=1e-3)
    assert set(host_names()) >= set(MEASURED)


def test_relative_speed_against_hand_computed_values():
    ref = _host("ref", a=10e-6, b=20e-6)
    # every op twice as slow: half the speed; the reference itself: 1
    assert HS.host_speed(_host(scale=2.0, a=10e-6, b=20e-6), ref) == pytest.approx(0.5)
    assert HS.host_speed(ref, ref) == 1.0
    # one op 4x slower, the other as fast: the geometric mean sqrt(1/4 * 1) = 0.5
    assert HS.host_speed(_host(a=40e-6, b=20e-6), ref) == pytest.approx(0.5)
    # only the ops both measured count (c is the host's alone); the autograd node counts when both have it
    assert HS.host_speed(_host(a=20e-6, c=1e-6), ref) == pytest.approx(0.5)
    both = HS.host_speed(_host(a=10e-6, autograd=40e-6), _host("r", a=10e-6, autograd=10e-6))
    assert both == pytest.approx(math.sqrt(0.25))
    with pytest.raises(InputError, match="shares no measured op"):
        HS.host_speed(_host(c=1e-6), ref)


def test_the_27b_host_runs_the_eager_paths_at_its_measured_ratio_to_the_27c_host():
    """b against c: exp(mean ln(t_c / t_b)) over add_, mul, gelu, layer_norm, linear, SDPA, autograd node =
    0.861 (host.csv: b is 1.5-29 % slower op by op)."""
    b, c = load_host("h100-host-2026-11-27b"), load_host("h100-host-2026-11-27c")
    ops = ("add_", "mul", "gelu", "layer_norm", "linear", "sdpa")
    ratios = [c.dispatch_s[o] / b.dispatch_s[o] for o in ops]
    ratios.append(c.autograd_node_s / b.autograd_node_s)
    hand = math.exp(sum(math.log(r) for r in ratios) / 7)
    assert HS.host_speed(b, c) == pytest.approx(hand, rel=1e-12)
    assert hand == pytest.approx(0.8611, abs=5e-4)


def _eager_system(host=None):
    system = load_system("dgx-h100-80gb")
    if host is not None:
        system = system.model_validate({**system.model_dump(), "host": host})
    return framework_system(load_framework("pytorch-eager"), system)


def test_the_systems_host_scales_the_profiles_figures():
    default = _eager_system().accelerator.efficiency
    assert load_system("dgx-h100-80gb").host == "h100-host-2026-11-27c"
    assert default.host_reference == "h100-host-2026-11-27c"
    assert default.host_speed == 1.0  # the profile's own host: its figures as measured
    assert default.host_sync_latency_s == pytest.approx(10.522e-6)
    slow = _eager_system("h100-host-2026-11-27b").accelerator.efficiency
    assert slow.host_speed == pytest.approx(0.8611, abs=5e-4)
    assert H.kernel_issue_s(slow, False) == pytest.approx(35.6e-6 / slow.host_speed)
    assert slow.host_sync_latency_s == pytest.approx(10.5345e-6)
    # a profile measured on no catalog host (Megatron's figure) keeps its figures on any host
    megatron = load_framework("megatron-core")
    assert megatron.host_reference is None
    sys_b = load_system("dgx-h100-80gb").model_validate(
        {**load_system("dgx-h100-80gb").model_dump(), "host": "h100-host-2026-11-27b"}
    )
    assert framework_system(megatron, sys_b).accelerator.efficiency.host_speed == 1.0


def test_an_unknown_host_is_one_line_naming_the_field(tmp_path):
    case = json.loads((CASES / "tiny-steps-2026-11.json").read_text())["cases"][0]
    case["host"] = "h100-host-nowhere"
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"cases": [case]}))
    with pytest.raises(
        InputError, match=r"host: unknown host 'h100-host-nowhere'.*allowed: h100-host"
    ):
        load_cases([path])
    model, system = load_model("gpt3-125m"), _eager_system()
    assert parse_set("host=h100-host-2026-11-27b").values == ("h100-host-2026-11-27b",)
    with pytest.raises(InputError) as err:
        apply_overrides(model, system, {"host": "nope"})
    assert str(err.value).startswith("--set host: unknown host 'nope'") and "\n" not in str(
        err.value
    )
    _, on_b = apply_overrides(model, system, {"host": "h100-host-2026-11-27b"})
    assert on_b.accelerator.efficiency.host_speed == pytest.approx(0.8611, abs=5e-4)


def test_each_tiny_case_names_the_host_it_ran_on():
    for file in ("tiny-steps-2026-11.json", "tiny-steps-2026-11-host2.json"):
        for case in json.loads((CASES / file).read_text())["cases"]:
            folder = MEASURED[case["host"]]
            assert f"{folder}/" in case["source"], case["name"]


def test_a_slower_host_never_makes_a_step_faster(monkeypatch):
    """Two tiny cases (host-bound steps) on the 27c host with every measured op scaled by 1, 1.25, 1.6, 2.5:
    the step time never falls, and rises over the range."""
    cases = load_cases([CASES / "tiny-steps-2026-11-host2.json"])
    base = load_host("h100-host-2026-11-27c")
    real = HS.load_host
    for case in cases[:2]:
        model, plan = case.model, case.plan
        previous = 0.0
        for scale in (1.0, 1.25, 1.6, 2.5):
            slow = base.model_copy(
                update={
                    "name": "slow",
                    "dispatch_s": {k: v * scale for k, v in base.dispatch_s.items()},
                    "autograd_node_s": base.autograd_node_s * scale,
                }
            )
            monkeypatch.setattr(
                HS, "load_host", lambda n, f="host", s=slow: s if n == "slow" else real(n, f)
            )
            step = estimate(model, _eager_system("slow"), plan).step_time_s
            assert step >= previous - 1e-15
            previous = step
        assert previous > estimate(model, _eager_system(), plan).step_time_s


def test_hosts_applied_in_turn_never_compound_and_keep_a_hand_factor():
    """The 27b host, then the 27c host: the speed is 27c's (1), not their product; a host_speed factor set by
    hand before the host (search: --set before the profile) stays a factor."""
    model = load_model("gpt3-125m")
    on_b = _eager_system("h100-host-2026-11-27b")
    _, back = apply_overrides(model, on_b, {"host": "h100-host-2026-11-27c"})
    assert back.accelerator.efficiency.host_speed == pytest.approx(1.0, rel=1e-12)
    _, again = apply_overrides(model, on_b, {"host": "h100-host-2026-11-27b"})
    assert again.accelerator.efficiency.host_speed == pytest.approx(0.8611, abs=5e-4)
    data = load_system("dgx-h100-80gb").model_dump()
    data["host"] = "h100-host-2026-11-27b"
    data["accelerator"]["efficiency"]["host_speed"] = 0.5
    hand = framework_system(load_framework("pytorch-eager"), load_system(data))
    assert hand.accelerator.efficiency.host_speed == pytest.approx(0.5 * 0.8611, abs=5e-4)
