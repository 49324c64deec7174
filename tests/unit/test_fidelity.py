"""Attention kernel curves, framework profiles, error bands and the constant refit (issue 8)."""

from __future__ import annotations

import pytest

from paraplan.catalog import framework_names, load_framework, load_model, load_system
from paraplan.cost.attention import (
    attention_shape_factor,
    attention_shape_scale,
    effective_kernel,
    kernel_relative_speed,
)
from paraplan.cost.compute import attention_efficiency
from paraplan.cost.frameworks import apply_framework, host_fields
from paraplan.specs.runtime import RuntimeCosts
from paraplan.specs.plan import PlanSpec
from paraplan.validate.band import error_band, plan_features
from paraplan.validate.fitted import FittedConstant, _golden, refit, with_constants


# ---- attention kernel curves (FA3 paper Fig. 5 fits) ------------------------------------------
def test_shape_factor_by_hand():
    # FA3, s = 4096, d = 128, causal: 4096/(4096+220) · 1 · 4096/(4096+128)
    assert attention_shape_factor("fa3", 4096, 128, True) == pytest.approx(
        4096 / 4316 * 4096 / 4224
    )
    # head dim 64: (64/(64+55)) / (128/(128+55)); non-causal drops the diagonal-tile factor
    assert attention_shape_factor("fa3", 1024, 64, False) == pytest.approx(
        1024 / 1244 * (64 / 119) / (128 / 183)
    )
    # head dims above 128 are capped
    assert attention_shape_factor("fa2", 1024, 256, False) == pytest.approx(1024 / 1131)
    assert attention_shape_scale("cudnn", 8192, 128, True) == pytest.approx(1.0)


def test_fitted_curve_reproduces_the_figure_within_three_percent():
    figure = {"fa3": [467, 565, 625, 638, 646, 648], "fa2": [309, 350, 362, 368, 370, 370]}
    plateau = {"fa3": 672.0, "fa2": 378.0}
    for kernel, tflops in figure.items():
        for seq, measured in zip([512, 1024, 2048, 4096, 8192, 16384], tflops):
            model = plateau[kernel] * attention_shape_factor(kernel, seq, 128, False)
            assert abs(model / measured - 1) < 0.04, (kernel, seq)


def test_longer_sequences_are_faster_per_flop_and_kernels_fall_back():
    acc = load_system("dgx-h100-80gb").accelerator
    # head dim 64 on FA3 at 16k: 497 / 648 in the figure; the fit gives (64/119)/(128/183) = 0.769
    assert attention_shape_factor("fa3", 16384, 64, False) / attention_shape_factor(
        "fa3", 16384, 128, False
    ) == pytest.approx(497 / 648, rel=0.01)
    effs = [attention_efficiency(acc, (s, s, 128, True)) for s in (1024, 4096, 16384, 131072)]
    assert effs == sorted(effs) and effs[-1] < 1.0
    assert attention_efficiency(acc, (8192, 8192, 128, True)) == pytest.approx(
        acc.efficiency.attention
    )
    assert effective_kernel("fa3", "ampere") == "fa2" and effective_kernel("fa3", "hopper") == "fa3"
    assert kernel_relative_speed("fa3", "fa2", "ampere") == 1.0
    assert (
        0.5 < kernel_relative_speed("fa2", "cudnn", "hopper") < 0.7
    )  # FA2 ~370 vs cuDNN ~600 TFLOP/s


# ---- framework profiles ----------------------------------------------------------------------
def test_every_profile_loads_and_cites_its_choices():
    assert {"megatron-core", "megatron-lm-2021", "deepspeed", "torchtitan", "maxtext"} <= set(
        framework_names()
    )
    for name in framework_names():
        profile = load_framework(name)
        assert profile.name == name and profile.source
        for field in ("attention_kernel", "grad_dtype", "overlap_dp_grad_reduce"):
            assert field in profile.sources, (name, field)


def test_apply_framework():
    h100 = load_system("dgx-h100-80gb")
    system, plan = apply_framework(
        load_framework("torchtitan"), h100, {"overlap_dp_grad_reduce": False}
    )
    assert plan["overlap_dp_grad_reduce"] is False  # the plan's explicit value wins
    assert plan["overlap_param_gather"] is True  # the profile fills the rest
    eff = system.accelerator.efficiency
    assert eff.attention_kernel == "fa2"
    assert eff.attention == pytest.approx(
        h100.accelerator.efficiency.attention * kernel_relative_speed("fa2", "cudnn", "hopper")
    )
    assert eff.eager_traffic_factor == 2.0  # eager element-wise ops' traffic (cost.compute)
    assert eff.hbm == h100.accelerator.efficiency.hbm
    assert system.accelerator.reserved_memory == pytest.approx((0.5 + 1.0 + 0.05 * 80) * 2**30)
    # the calibration profile changes nothing that the visible H100 set was fitted with but the host model's
    # inputs (cost.host: its launch and synchronisation times), that it pads its vocabulary
    # (cost.gemm_alignment) and its runtime's overlapped p2p (cost.runtimes; Megatron-LM's
    # overlap_p2p_comm default, priced with interleaving) and, in fp8 runs only, linear_proj's own fp8 input
    # copy under its default delayed recipe (graph.mla.attention_output_bytes)
    megatron = load_framework("megatron-core")
    same, _ = apply_framework(megatron, h100, {})
    assert same.accelerator.efficiency.aligned_gemms_only
    assert same.accelerator.efficiency.runtime == RuntimeCosts(
        p2p_overlap=True, proj_quantised_copy=True
    )
    host = set(host_fields(megatron)) | {"aligned_gemms_only", "runtime"}
    assert same.accelerator.efficiency.model_dump(exclude=host) == (
        h100.accelerator.efficiency.model_dump(exclude=host)
    )
    assert same.accelerator.reserved_memory == h100.accelerator.reserved_memory


# ---- error bands ---------------------------------------------------------------------------
def _plan(**kw):
    base = dict(gpus=16, tp=8, global_batch=16, seq_length=8192, sequence_parallel=True, zero=1)
    return PlanSpec(**{**base, **kw})


def test_moe_features_are_kept_apart_from_dense_ones():
    moe, dense, system = (
        load_model("mixtral-8x7b"),
        load_model("llama3-8b"),
        load_system("dgx-h100-80gb"),
    )
    plan = _plan(gpus=8, tp=1, sequence_parallel=False)
    moe_features, dense_features = (
        plan_features(moe, system, plan),
        plan_features(dense, system, plan),
    )
    assert moe_features[0] == "architecture:hopper moe" and "hopper moe dp" in moe_features
    assert not set(moe_features) & set(dense_features)


# ---- refit ------------------------------------------------------------------------------------
def test_golden_section_and_coordinate_descent():
    assert _golden(lambda x: (x - 0.3) ** 2, 0.0, 1.0, 1e-6) == pytest.approx(0.3, abs=1e-5)
    a = FittedConstant(
        "a", ("dgx-a100-80gb",), ("accelerator", "efficiency", "gemm"), (0.0, 1.0), ("x",)
    )
    b = FittedConstant(
        "b", ("dgx-a100-80gb",), ("accelerator", "efficiency", "hbm"), (0.0, 1.0), ("x",)
    )
    values = refit(
        lambda v: (v[a] - 0.2) ** 2 + (v[b] - 0.7) ** 2 + 0.1 * v[a] * v[b],
        [a, b],
        {a: 0.5, b: 0.5},
        sweeps=4,
    )
    # minimum of the quadratic: 2(a-0.2)+0.1b = 0, 2(b-0.7)+0.1a = 0
    assert values[a] == pytest.approx(0.1652, abs=2e-3) and values[b] == pytest.approx(
        0.6917, abs=2e-3
    )


def test_with_constants_scales_from_the_catalog_value():
    system = load_system("dgx-a100-80gb")
    gemm = FittedConstant(
        "g", ("dgx-a100-80gb",), ("accelerator", "efficiency", "gemm"), (0.5, 1.0), ("x",)
    )
    changed = with_constants(system, {gemm: 0.6})
    assert changed.accelerator.efficiency.gemm == pytest.approx(0.6) and hash(changed) != hash(
        system
    )
    assert with_constants(load_system("dgx-h100-80gb"), {gemm: 0.6}) == load_system("dgx-h100-80gb")


# ---- overlap mechanisms (hand-computed) ---------------------------------------------------------
def test_overlap_mechanisms_by_hand():
    from paraplan.cost import overlap as ov

    # fair sharing: alone 1 s and 3 s on one link -> the short flow ends at 2 s, the long at 4 s
    assert list(ov.fair_share_times_s([3.0, 1.0])) == [4.0, 2.0]
    assert (
        float(ov.shared_link_time_s(1.0, 3.0)) == 2.0
        and float(ov.shared_link_time_s(2.0, 0.0)) == 2.0
    )
    # 4 chunks, comm 0.4 s, GEMM 1.0 s, 5 % SM slowdown: 0.1 + 0 + 0.05
    assert float(ov.chunked_overlap_exposed_s(0.4, 1.0, 4, 0.05)) == pytest.approx(0.15)
    # comm-bound: comm 2 s, GEMM 1 s, 2 chunks, no slowdown: 1 + 0.5·1
    assert float(ov.chunked_overlap_exposed_s(2.0, 1.0, 2, 0.0)) == pytest.approx(1.5)
    # 10 buckets, reduce 1 s, backward 5 s: only the last bucket shows
    assert float(ov.bucketed_reduce_exposed_s(1.0, 5.0, 10)) == pytest.approx(0.1)
    assert float(ov.bucketed_reduce_exposed_s(1.0, 0.5, 2)) == pytest.approx(0.5 + 0.25)
    # 32 layers, gather 3 ms, compute 2 ms: prefetch 1 -> 3 + 31·1 ms; no prefetch -> 96 ms
    assert float(ov.prefetched_gather_exposed_s(3e-3, 2e-3, 32, 1)) == pytest.approx(34e-3)
    assert float(ov.prefetched_gather_exposed_s(3e-3, 2e-3, 32, 0)) == pytest.approx(96e-3)
    assert float(ov.prefetched_gather_exposed_s(3e-3, 2e-3, 32, 2)) == pytest.approx(3e-3)
    # ring of 4: 3 steps, comm 5 ms vs attention 4 ms, sync 0.1 ms
    assert float(ov.ring_attention_exposed_s(5e-3, 4e-3, 4, 1e-4)) == pytest.approx(3 * 1e-3 + 3e-4)
    # a Ulysses all-to-all over cp = 8 on one node: of an 800-byte buffer each rank sends (c−1)/c, 700 B,
    # through the split every all-to-all of the model takes (graph.transformer.ulysses_collectives names
    # the buffer, cost.comm.all_to_all_split_bytes the bytes that leave it)
    from paraplan.cost.comm import GroupSpan, all_to_all_split_bytes

    assert sum(all_to_all_split_bytes(800.0, GroupSpan(8, 8, 1))) == pytest.approx(700.0)


def test_leave_one_group_out_refits_without_the_group():
    from dataclasses import replace

    from paraplan.validate.case_files import load_cases
    from paraplan.validate.cv import cross_validate
    from paraplan.validate.fitted import FITTED_CONSTANTS

    cases = [c for c in load_cases() if c.name.startswith("korthikanti2022-tab5-megatron-22b")]
    cases = [replace(cases[0], group="a"), replace(cases[1], group="b")]
    gemm = [
        c for c in FITTED_CONSTANTS if c.name == "gemm.bf16"
    ]  # value: the A100 cap (catalog.gemm_benchmarks)
    report = cross_validate(cases, constants=gemm)
    assert set(report["groups"]) == {"a", "b"}
    for group in report["groups"].values():
        value = group["refitted"]["gemm.bf16"]
        assert 0.55 <= value <= 0.89 and group["training_cases"] == 1
    # one case constrains the cap exactly: refitting on "b" alone reproduces "b" (in-sample error ~0)
    assert report["cv_step_time_mape_pct"] >= 0 and len(report["cases"]) == 2


def test_api_estimate_with_a_framework():
    from paraplan.api import estimate

    plain = estimate("llama3-8b", "dgx-h100-80gb", gpus=8, global_batch=16, seq_length=8192, zero=1)
    core = estimate(
        "llama3-8b",
        "dgx-h100-80gb",
        gpus=8,
        global_batch=16,
        seq_length=8192,
        zero=1,
        framework="megatron-core",
    )
    titan = estimate(
        "llama3-8b",
        "dgx-h100-80gb",
        gpus=8,
        global_batch=16,
        seq_length=8192,
        zero=1,
        framework="torchtitan",
    )
    assert core.step_time_s == pytest.approx(plain.step_time_s)  # the calibration profile
    assert titan.step_time_s > plain.step_time_s  # FA2 kernel and eager element-wise ops


def test_cases_of_another_framework_speak_only_for_that_framework():
    """The ZeRO-3 runs of Narayanan et al. 2021 Table 2 (DeepSpeed as of April 2021, still predicted up to
    18 % too fast) widen the band of a deepspeed-2021 estimate, not that of a Megatron-LM one of the same
    plan (validate.band)."""
    model, system = load_model("gpt3-175b"), load_system("dgx-a100-80gb")
    plan = PlanSpec(
        gpus=1536,
        tp=1,
        pp=1,
        dp=1536,
        micro_batch=1,
        global_batch=1536,
        seq_length=2048,
        recompute="full",
        zero=3,
        dtype="fp16",
        attention="unfused",
    )
    deepspeed = error_band(model, system, plan, 1.0, "deepspeed-2021")
    megatron = error_band(model, system, plan, 1.0)
    assert deepspeed.high_s > 1 / (1 - 0.15)  # the -18 % case is in its population
    assert megatron.high_s < deepspeed.high_s
    assert all(" deepspeed-2021 " in f for f in deepspeed.features[1:]) and not any(
        "deepspeed" in f for f in megatron.features
    )
