"""Leave-one-group-out cross-validation of the constants fitted on AMP's trials (``paraplan validate --hetero --cv``)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from paraplan.cli import main
from paraplan.step.engines import engine_rules_of
from paraplan.step.per_stage import estimate_stage_plan
from paraplan.validate.cv import hetero_step_error, _prior, cross_validate_hetero
from paraplan.validate.fitted import FITTED_CONSTANTS, with_engine_constants
from paraplan.validate.hetero import bundled_hetero_files, load_hetero_cases, run_hetero_cases

AMP = {c.name: c for c in FITTED_CONSTANTS if c.fitted_on[0].startswith("amp-")}


@pytest.fixture(scope="module")
def cases():
    return load_hetero_cases()


def _few(cases, per_group=3):
    """The first ``per_group`` timed cases of each group."""
    out: dict[str, list] = {}
    for c in cases:
        if c.measured and len(out.setdefault(c.group, [])) < per_group:
            out[c.group].append(c)
    return [c for group in out.values() for c in group]


def test_the_amp_constants_are_listed_with_their_catalog_values():
    assert set(AMP) == {
        "t4.gemm",
        "t4.hbm",
        "deepspeed.host_layer_forward_s",
        "p3.network_efficiency",
    }
    assert AMP["t4.gemm"].catalog_value() == 0.27 and AMP["t4.hbm"].catalog_value() == 0.6
    assert (
        AMP["deepspeed.host_layer_forward_s"].catalog_value()
        == engine_rules_of("deepspeed", "amp2022").host_layer_forward_s
        == 1e-3
    )
    assert AMP["p3.network_efficiency"].catalog_value() == 0.9
    # with nothing to fit on, a constant takes its schema default: the network's 0.85, no host time
    assert (
        _prior(AMP["p3.network_efficiency"]) == 0.85
        and _prior(AMP["deepspeed.host_layer_forward_s"]) == 0.0
    )


def test_catalog_values_reproduce_validate(cases):
    """The cross-validation's error at the shipped values is the error ``paraplan validate --hetero`` reports."""
    few = _few(cases, 2)
    shipped = {k: k.catalog_value() for k in AMP.values()}
    entries = {e["name"]: e for e in run_hetero_cases(few)["cases"]}
    for case in few:
        assert hetero_step_error(case, shipped) == pytest.approx(
            entries[case.name]["error_pct"]["step_time_s"], rel=1e-12
        )


def test_engine_rules_override_reaches_the_estimate(cases):
    """A refitted runtime constant changes the estimate (by hand: with no host time, each transformer layer of the
    slowest stage loses h_f + 2·h_f = 3 ms per micro-batch, so the step gets shorter), and the plan's own rules
    are left as they were."""
    case = next(c for c in cases if c.name == "het-001")
    shipped = estimate_stage_plan(case.model, case.cluster, case.plan).step_time_s
    amp = engine_rules_of("deepspeed", "amp2022")  # the case's engine and stack (plan.engine_stack)
    no_host = with_engine_constants(amp, {AMP["deepspeed.host_layer_forward_s"]: 0.0})
    assert no_host == replace(amp, host_layer_forward_s=0.0)
    faster = estimate_stage_plan(case.model, case.cluster, case.plan, no_host).step_time_s
    # 8 micro-batches x 6 layers of the T4 stage x 3 ms is the least the steady state loses
    assert shipped - faster >= 8 * 6 * 3e-3 * 0.99
    assert estimate_stage_plan(case.model, case.cluster, case.plan).step_time_s == shipped


def test_leave_one_group_out_on_a_subset(cases):
    """Each group is predicted with constants refitted on the other: the T4 constants and the host time on the
    other group's trials; the p3 network efficiency, which only the mixed cluster has, from its prior."""
    constants = [AMP["t4.gemm"], AMP["p3.network_efficiency"]]
    report = cross_validate_hetero(_few(cases), constants=constants)
    mixed, t4 = report["groups"]["amp-mixed"], report["groups"]["amp-t4"]
    assert mixed["training_cases"] == t4["training_cases"] == 3
    assert (
        mixed["prior_only"] == ["p3.network_efficiency"]
        and mixed["refitted"]["p3.network_efficiency"] == 0.85
    )
    assert t4["prior_only"] == [] and set(t4["refitted"]) == {
        "t4.gemm"
    }  # no p3 node in the T4 cluster
    for group in (mixed, t4):
        assert 0.15 <= group["refitted"]["t4.gemm"] <= 0.8 and group["cv_step_time_mape_pct"] >= 0
    assert len(report["cases"]) == 6 and report["cv_step_time_mape_pct"] is not None


def test_validate_hetero_cv_cli(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    (path,) = bundled_hetero_files()
    raw = json.loads(path.read_text())
    keep = {c.name for c in _few(load_hetero_cases(), 2)}
    subset = tmp_path / "amp_subset.json"
    subset.write_text(json.dumps(dict(raw, cases=[r for r in raw["cases"] if r["name"] in keep])))
    with pytest.raises(SystemExit) as exit_info:
        main(["validate", "--cases", str(subset), "--cv"])
    out, err = capsys.readouterr()
    assert exit_info.value.code in (0, None), err
    assert "Leave-one-group-out cross-validation" in out and "amp-mixed" in out and "amp-t4" in out


def test_amp_trials_are_reported_as_calibration_cases(cases):
    """The constants of validate.fitted were fitted on both AMP groups, so ``paraplan validate --hetero`` labels
    every timed trial a calibration case (the held-out figures come from ``--cv``)."""
    few = _few(cases, 2)
    report = run_hetero_cases(few)
    assert {e["role"] for e in report["cases"]} == {"calibration"}
    assert report["summary"]["calibration"]["step_time_cases"] == len(few)
    assert report["summary"]["held_out"]["step_time_cases"] == 0


def test_cross_validation_reports_its_progress(cases):
    """``progress(group, done, total)`` before each group's refit and once at the end (what the CLI's bar shows)."""
    calls = []
    cross_validate_hetero(
        _few(cases, 1), constants=[AMP["t4.hbm"]], progress=lambda *a: calls.append(a)
    )
    assert calls == [("amp-mixed", 0, 2), ("amp-t4", 1, 2), ("", 2, 2)]
