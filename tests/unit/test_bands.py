"""Error bands from cross-validated residuals (validate.band) and their held-out coverage
(validate.coverage): quantiles by hand, back-off, the wide prior, leaving the group out."""

from __future__ import annotations

from dataclasses import replace

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.specs.plan import PlanSpec
from paraplan.validate.band import (
    CLAIMED_COVERAGE_PCT,
    PRIOR_ERROR_PCT,
    RUN_TO_RUN_PCT,
    conformal_range,
    error_band,
    min_groups,
)
from paraplan.validate.case_files import Case, load_cases
from paraplan.validate.coverage import attach_bands
from paraplan.validate.features import band_keys, plan_features
from paraplan.validate.residuals import Residual, residual_records
from paraplan.validate.run import run_cases

MODEL, SYSTEM = load_model("llama3-70b"), load_system("dgx-h100-80gb")
PLAN = PlanSpec(gpus=64, tp=8, pp=2, global_batch=128, seq_length=8192, dtype="bf16")


def _records(errors_by_group: dict[str, list[float]], model=MODEL, system=SYSTEM, plan=PLAN):
    """Residuals of made-up groups that share the plan's keys and features (nothing extrapolated)."""
    keys, features = band_keys(model, system, plan), plan_features(model, system, plan)
    return [
        Residual(f"{g}-{i}", g, "calibration", keys, features, e, e)
        for g, errors in errors_by_group.items()
        for i, e in enumerate(errors)
    ]


# ---- quantiles by hand ------------------------------------------------------------------------
def test_one_case_per_group_is_the_split_conformal_interval():
    # n = 9 at 80 %: k = floor(10 · 0.1) = 1 → [min, max]
    nine = [(f"g{i}", float(e)) for i, e in enumerate([5, -4, 3, -2, 1, 0, 7, -6, 2])]
    assert conformal_range(nine) == (-6.0, 7.0)
    # n = 19: k = floor(20 · 0.1) = 2 → the 2nd smallest and the 2nd largest
    nineteen = [(f"g{i}", float(i)) for i in range(19)]
    assert conformal_range(nineteen) == (1.0, 17.0)
    assert conformal_range(nine[:8]) is None  # 8 groups: no finite 80 % band
    assert min_groups() == 9 and min_groups(90) == 19 and min_groups(50) == 3


def test_a_group_of_many_cases_weighs_as_one_group():
    # 18 single-case groups at 0..17 and one group of ten cases at 100: G = 19, need (1.8/2)·20 = 18.
    # Ascending, the singletons reach 18 at 17 (each weighs 1), the ten 100s weigh 1 in all;
    # descending, the 100s weigh 1, then 17, 16, ... reach 18 at 1.
    residuals = [(f"s{i}", float(i)) for i in range(18)] + [("big", 100.0)] * 10
    assert conformal_range(residuals) == (1.0, 17.0)
    # counted case by case (n = 28, k = 2) the big group would set the upper end: 100
    assert sorted(e for _, e in residuals)[28 - 2] == 100.0


def test_the_band_of_a_pool_by_hand():
    groups = {f"g{i}": [float(e)] for i, e in enumerate([-8, -2, -1, 0, 1, 2, 3, 4, 12])}
    band = error_band(MODEL, SYSTEM, PLAN, 2.0, residuals=_records(groups))
    # errors [-8, 12] at 80 % with 9 groups: true time 2/(1 + 0.12) .. 2/(1 - 0.08)
    assert band.low_s == pytest.approx(2.0 / 1.12) and band.high_s == pytest.approx(2.0 / 0.92)
    assert band.coverage_pct == CLAIMED_COVERAGE_PCT and not band.prior and band.validated
    assert band.basis.startswith("9 cases of 9 groups: megatron on hopper")
    assert band.to_dict()["low_s"] == band.low_s and band.to_dict()["coverage_pct"] == 80


def test_a_narrow_pool_is_widened_to_the_run_to_run_spread():
    groups = {f"g{i}": [0.5] for i in range(9)}
    band = error_band(MODEL, SYSTEM, PLAN, 1.0, residuals=_records(groups))
    assert band.low_s == pytest.approx(1 / (1 + RUN_TO_RUN_PCT / 100))
    assert band.high_s == pytest.approx(1 / (1 - RUN_TO_RUN_PCT / 100))


# ---- conditioning -----------------------------------------------------------------------------
def test_traits_are_matched_while_enough_groups_share_them():
    fp8 = PLAN.model_copy(update={"dtype": "fp8"})
    bf16_records = _records({f"b{i}": [-20.0 + i] for i in range(9)})
    fp8_records = _records({f"f{i}": [float(i)] for i in range(9)}, plan=fp8)
    band = error_band(MODEL, SYSTEM, fp8, 1.0, residuals=bf16_records + fp8_records)
    assert band.basis.startswith("9 cases of 9 groups") and ", fp8" in band.basis
    assert band.high_s == pytest.approx(1 / 0.97)  # fp8 errors 0..8: the bf16 -20s are not in it
    # five fp8 groups are too few: the pool drops fp8 (and the traits after it) and takes them all
    band = error_band(MODEL, SYSTEM, fp8, 1.0, residuals=bf16_records + fp8_records[:5])
    assert band.basis.startswith("14 cases of 14 groups") and band.high_s > 1 / 0.85


def test_a_pool_that_drops_a_trait_is_hulled_with_the_nearest_cases():
    fp8 = PLAN.model_copy(update={"dtype": "fp8"})
    dense = _records({f"d{i}": [(-1.0) ** i * (i % 3)] for i in range(20)})  # errors -2..2
    fp8_records = _records({"f0": [-15.0], "f1": [-9.0]}, plan=fp8)
    band = error_band(MODEL, SYSTEM, fp8, 1.0, residuals=dense + fp8_records)
    # 22 groups, the two fp8 ones too few to keep the trait: the conformal ends of all 22 are the 2nd
    # from each end, -9 and 2; the nearest cases (the fp8 groups, matching every trait) reach -15
    assert band.basis.startswith("22 cases of 22 groups") and ", fp8" not in band.basis
    assert band.basis.endswith("megatron on hopper, no moe")  # the model kind is kept
    assert band.high_s == pytest.approx(1 / 0.85) and band.low_s == pytest.approx(1 / 1.03)
    # a bf16 plan's pool keeps its traits (20 bf16 groups): no hull, the fp8 errors stay out
    bf16_band = error_band(MODEL, SYSTEM, PLAN, 1.0, residuals=dense + fp8_records)
    assert bf16_band.high_s == pytest.approx(1 / 0.97)


MOE_MODEL, MOE_PLAN = load_model("mixtral-8x7b"), PLAN.model_copy(update={"ep": 8})


def test_dense_and_moe_residuals_are_never_pooled():
    """The model kind is never dropped (validate.band.KIND_TRAITS): a dense plan's band is built from
    dense cases only, an MoE plan's from MoE cases only, on any generation before the other kind."""
    b200 = load_system("dgx-b200")
    dense_hopper = _records({f"h{i}": [1.0] for i in range(5)})  # 5 dense Hopper groups at +1 %
    dense_blackwell = _records({f"b{i}": [-1.0] for i in range(4)}, system=b200)  # 4 at -1 %
    moe_hopper = _records({f"m{i}": [-50.0] for i in range(4)}, model=MOE_MODEL, plan=MOE_PLAN)
    records = dense_hopper + dense_blackwell + moe_hopper
    # 9 Hopper groups, 4 of them MoE: the dense plan's pool is the 9 dense groups of any generation,
    # errors -1..+1 (widened to the ±3 % run-to-run spread), not the MoE -50 % (true time 2× estimate)
    band = error_band(MODEL, SYSTEM, PLAN, 1.0, residuals=records)
    assert band.basis.startswith("9 cases of 9 groups: megatron on any generation, no moe")
    assert band.high_s == pytest.approx(1 / 0.97) and band.low_s == pytest.approx(1 / 1.03)
    # 9 MoE groups: the MoE plan's band is theirs alone, errors -50..-42 (the dense +1s stay out)
    moe = _records({f"m{i}": [-50.0 + i] for i in range(9)}, model=MOE_MODEL, plan=MOE_PLAN)
    moe_band = error_band(MOE_MODEL, SYSTEM, MOE_PLAN, 1.0, residuals=dense_hopper + moe)
    assert moe_band.basis.startswith("9 cases of 9 groups: megatron on hopper, moe")
    # its upper error end -42 is widened to the +3 % run-to-run spread
    assert moe_band.high_s == pytest.approx(1 / 0.5) and moe_band.low_s == pytest.approx(1 / 1.03)


def test_a_kind_with_too_few_groups_gets_the_prior_hulled_with_its_cases():
    """Four MoE groups (under the 9 a band needs) and 20 dense ones: the MoE plan gets the wide prior,
    hulled with the MoE cases of its generation (-50 % beyond the prior's -30 %), not the dense envelope."""
    dense = _records({f"d{i}": [0.0] for i in range(20)})
    moe = _records({f"m{i}": [-50.0 + i] for i in range(4)}, model=MOE_MODEL, plan=MOE_PLAN)
    band = error_band(MOE_MODEL, SYSTEM, MOE_PLAN, 1.0, residuals=dense + moe)
    hi = PRIOR_ERROR_PCT[1]
    assert band.prior and not band.validated and band.pool_cases == 4
    assert (
        band.basis
        == "wide prior: 4 groups ran mixture-of-experts models on the megatron stack, fewer than 9"
    )
    assert band.high_s == pytest.approx(1 / 0.5) and band.low_s == pytest.approx(1 / (1 + hi / 100))
    # the dense plan keeps its conformal band of the 20 dense groups
    assert not error_band(MODEL, SYSTEM, PLAN, 1.0, residuals=dense + moe).prior


def test_an_unseen_stack_or_generation_gets_the_wide_prior():
    records = _records({f"g{i}": [float(i)] for i in range(12)})  # Megatron on Hopper only
    lo, hi = PRIOR_ERROR_PCT
    titan = error_band(MODEL, SYSTEM, PLAN, 1.0, "torchtitan", residuals=records)
    assert titan.prior and "torchtitan" in titan.basis and not titan.validated
    assert titan.low_s == pytest.approx(1 / (1 + hi / 100))
    assert titan.high_s == pytest.approx(1 / (1 + lo / 100))
    mi300x = load_system("mi300x-8")
    amd = error_band(MODEL, mi300x, PLAN, 1.0, residuals=records)
    assert amd.prior and "cdna3" in amd.basis
    assert amd.high_s == pytest.approx(titan.high_s) and amd.text().endswith("*")
    # a trait no case of the stack has (one GPU) takes the prior too
    one = PlanSpec(gpus=1, global_batch=8, seq_length=8192, dtype="bf16")
    single = error_band(load_model("llama3-8b"), SYSTEM, one, 1.0, residuals=records)
    assert single.prior and "single gpu" in single.basis
    assert single.high_s == pytest.approx(titan.high_s)
    # the prior is never narrower than the Megatron envelope it replaces
    megatron = error_band(MODEL, SYSTEM, PLAN, 1.0, residuals=records)
    assert titan.low_s < megatron.low_s and titan.high_s > megatron.high_s


def test_the_announced_rubin_part_is_its_own_generation_and_gets_the_wide_prior():
    """vr200-nvl72 (no case ran on Rubin) is not read as a Blackwell part by the bands (issue 33: 'a stack or
    generation no case covers gets a wide prior'); its prices are unchanged (no kernel rule names either)."""
    records = _records({f"g{i}": [float(i)] for i in range(12)})
    vr200, b300 = load_system("vr200-nvl72"), load_system("dgx-b300")
    assert band_keys(MODEL, vr200, PLAN).generation == "rubin"
    rubin = error_band(MODEL, vr200, PLAN, 1.0, residuals=records)
    lo, hi = PRIOR_ERROR_PCT
    assert rubin.prior and "rubin" in rubin.basis
    assert rubin.low_s == pytest.approx(1 / (1 + hi / 100))
    assert rubin.high_s == pytest.approx(1 / (1 + lo / 100))
    assert "architecture:rubin" in rubin.extrapolated
    # the bundled residuals too: Blackwell cases exist, none on Rubin
    assert error_band(MODEL, vr200, PLAN, 1.0).prior
    assert not error_band(MODEL, b300, PLAN, 1.0).prior


@pytest.mark.parametrize("name", ["rtx-5090-8", "rtx-pro-6000-4"])
def test_the_rtx_blackwell_parts_are_their_own_generation_and_get_the_wide_prior(name):
    """The GeForce / RTX PRO Blackwell parts (GB202, compute capability 12.0) are not read as the data-centre
    Blackwell parts every Blackwell case ran on: no case ran on them, so the bundled residuals give them the
    wide prior (issue 33), while dgx-b200 keeps the Blackwell cases' band."""
    system = load_system(name)
    assert band_keys(MODEL, system, PLAN).generation == "blackwell-rtx"
    band = error_band(MODEL, system, PLAN, 1.0)
    assert band.prior and "blackwell-rtx" in band.basis
    assert not error_band(MODEL, load_system("dgx-b200"), PLAN, 1.0).prior


def test_a_stack_with_too_few_groups_gets_the_prior_hulled_with_its_cases():
    records = _records({f"g{i}": [float(i)] for i in range(12)})
    keys = band_keys(MODEL, SYSTEM, PLAN, "deepspeed-2021")
    few = [Residual("d0", "d", "held_out", keys, (), -60.0, -60.0)]
    band = error_band(MODEL, SYSTEM, PLAN, 1.0, "deepspeed-2021", residuals=records + few)
    assert band.prior and band.high_s == pytest.approx(1 / 0.4)  # -60 % beyond the prior's -30 %


# ---- held-out coverage ------------------------------------------------------------------------
def test_the_held_out_coverage_leaves_the_group_out():
    cases = [c for c in load_cases() if isinstance(c, Case) and "step_time_s" in c.measured]
    report = run_cases(cases)
    records = residual_records(cases, report["cases"], {})
    group = "dgxc-llama31-70b-bf16"
    spoiled = [r if r.group != group else replace(r, error_pct=400.0) for r in records]
    coverage = attach_bands(report, cases, spoiled)
    mine = [(c, e) for c, e in zip(cases, report["cases"]) if c.cv_group == group]
    for case, entry in mine:
        # the band is the one of the other groups' residuals alone: the 400 % of its own is not in it
        others = [r for r in records if r.group != group]
        specs = (case.model, case.system, case.plan)
        expected = error_band(*specs, entry["predicted"]["step_time_s"], case.framework, others)
        assert entry["error_band"] == expected.to_dict()
        assert entry["band_check"]["held_out_error_pct"] == 400.0
        assert entry["band_check"]["in_band"] is False  # judged on its own held-out error
    assert coverage["by_group"][group] == {"cases": len(mine), "covered": 0, "coverage_pct": 0.0}
    assert coverage["claimed_pct"] == CLAIMED_COVERAGE_PCT
    assert coverage["cases"] == sum(g["cases"] for g in coverage["by_group"].values())
    assert report["summary"]["band_coverage"] is coverage
