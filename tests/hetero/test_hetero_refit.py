"""validate.hetero_refit: the constants fitted on AMP's trials, refitted the way they were fitted (jointly over
both groups' timed trials)."""

from __future__ import annotations

import pytest

from paraplan.validate.hetero import load_hetero_cases, run_hetero_cases
from paraplan.validate.hetero_refit import amp_constants, hetero_refit, main
from paraplan.validate.joint_refit import uniform_constants


def test_it_refits_the_constants_of_amps_trials_only():
    names = {k.name for k in amp_constants()}
    assert names == {"t4.gemm", "t4.hbm", "deepspeed.host_layer_forward_s", "p3.network_efficiency"}
    assert not names & {k.name for k in uniform_constants()}


@pytest.mark.slow
def test_no_sweep_keeps_the_catalog_values_and_validates_figures():
    """At the catalog values each group's MAPE is the one ``paraplan validate --hetero`` reports."""
    result = hetero_refit(sweeps=0)
    assert all(was == now for was, now in result["constants"].values())
    assert result["before"] == result["after"]
    by_group = run_hetero_cases(load_hetero_cases())["summary"]["by_group"]
    assert set(result["before"]) == {"amp-mixed", "amp-t4"}
    for group, mape in result["before"].items():
        assert mape == pytest.approx(by_group[group]["step_time_s_mape_pct"], rel=1e-9)


def test_an_unknown_hold_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--hold", "h100.gemm_fp8"])
    assert exit_info.value.code == 2
    assert "'h100.gemm_fp8' is not a constant fitted on AMP's trials" in capsys.readouterr().err
