"""The quad-GH200 node (issue 8: a hardware variant as a catalog system): the H100 GPU with 96 GB HBM3, four per
NVLink domain, 25 GB/s of Slingshot per GPU, the Grace LPDDR5X over NVLink-C2C as the offload tier."""

import pytest

from paraplan.api import estimate
from paraplan.catalog import load_system, system_names
from paraplan.validate.fitted import FITTED_CONSTANTS

GiB = 2**30
NAME = "gh200-96gb-quad"


def test_loads_with_its_datasheet_numbers():
    assert NAME in system_names()
    s = load_system(NAME)
    a = s.accelerator
    assert a.hbm_capacity == pytest.approx(96 * GiB)
    assert a.hbm_bandwidth == pytest.approx(4e12)
    assert a.architecture == "hopper" and a.sm_count == 132
    # the H100 SXM tensor rates (same GH100 configuration): 1,979 / 3,958 TFLOPS sparse, halved
    h100 = load_system("dgx-h100-80gb").accelerator
    assert a.matrix_flops == h100.matrix_flops and a.vector_flops == h100.vector_flops
    assert a.host_bandwidth == pytest.approx(
        300e9
    )  # NVLink-C2C: 450 GB/s per direction, ~300 measured D2H
    assert a.host_bandwidth > 4 * h100.host_bandwidth  # C2C against PCIe Gen5
    assert a.host_memory == pytest.approx(120e9)  # Alps: ~120 GB LPDDR5X usable per Grace
    assert s.node.gpus_per_domain == 4 and s.node.nvlink_bandwidth == pytest.approx(3 * 150e9)
    assert s.network.nic_bandwidth == pytest.approx(25e9)  # Slingshot-11, 200 Gb/s per GH200


def test_carries_the_h100_efficiencies_and_is_listed_with_them():
    """Same silicon as H100 SXM: the fitted constants of the H100 list this system, at the same catalog values
    (a refit moves it with dgx-h100-80gb)."""
    mine = [c for c in FITTED_CONSTANTS if NAME in c.systems]
    assert {c.name for c in mine} >= {
        "gemm.bf16",
        "h100.gemm_fp8",
        "h100.attention",
        "moe.grouped_gemm_fp8",
        "moe.host_sync_s",
        "moe.a2a_overlap_cost",
    }
    eff, ref = (
        load_system(NAME).accelerator.efficiency,
        load_system("dgx-h100-80gb").accelerator.efficiency,
    )
    assert eff == ref
    for const in mine:
        value: object = load_system(NAME)
        for part in const.path:
            value = getattr(value, part)
        if (
            const.name != "gemm.bf16"
        ):  # gemm.bf16 lists caps that differ by GPU (test_gemm_benchmarks)
            assert value == pytest.approx(const.catalog_value()), const.name


def test_a_plan_that_fits_a_dgx_h100_runs_with_more_headroom():
    plan = dict(gpus=64, tp=4, pp=4, seq_length=4096, global_batch=64, zero=1)
    dgx = estimate("llama3-70b", "dgx-h100-80gb", **plan)
    gh = estimate("llama3-70b", NAME, **plan)
    assert dgx.fits and gh.fits
    assert gh.peak_stage.capacity_bytes == pytest.approx(96 * GiB)
    assert gh.peak_stage.capacity_bytes > dgx.peak_stage.capacity_bytes
    headroom = lambda e: e.peak_stage.capacity_bytes - e.peak_stage.peak_bytes  # noqa: E731
    assert headroom(gh) > headroom(dgx) + 15 * GiB
    # same GPU, same per-GPU memory plan; the step differs through the fabric (4-GPU domains, 25 GB/s NICs)
    assert gh.peak_stage.peak_bytes == pytest.approx(dgx.peak_stage.peak_bytes, rel=1e-6)
    assert gh.step_time_s > 0 and 0 < gh.mfu < 1


ALPS = "alps-gh200"


def test_the_alps_entry_is_the_quad_node_under_the_cscs_module_cap():
    """alps-gh200: gh200-96gb-quad with the GPU's share of CSCS's 660 W module cap, 660 W less the Grace CPU's
    rated 250 W with its LPDDR5X (half the 500 W Grace CPU Superchip), against the H100 SXM's 700 W rating."""
    alps, quad = load_system(ALPS), load_system(NAME)
    assert alps.accelerator.tdp_w == 700 and alps.accelerator.power_cap_w == 660 - 500 / 2
    assert quad.accelerator.power_cap_w is None  # the uncapped module (1000 W) leaves the GPU 700 W
    assert alps.accelerator.clock_fraction() == pytest.approx(0.812, abs=1e-3)
    # the same node otherwise: memory, fabric, efficiencies
    assert alps.node == quad.node and alps.network == quad.network
    assert alps.accelerator.efficiency == quad.accelerator.efficiency
    assert alps.accelerator.hbm_capacity == quad.accelerator.hbm_capacity
    for const in FITTED_CONSTANTS:
        assert (ALPS in const.systems) == (NAME in const.systems), const.name


def test_the_cap_slows_compute_and_leaves_memory_alone():
    plan = dict(gpus=256, tp=2, micro_batch=4, global_batch=1024, seq_length=4096, zero=1)
    alps, quad = estimate("llama3-8b", ALPS, **plan), estimate("llama3-8b", NAME, **plan)
    assert alps.step_time_s > quad.step_time_s
    assert (
        alps.step_time_s < quad.step_time_s / 0.812
    )  # communication does not scale with the clock
    assert alps.peak_stage.peak_bytes == pytest.approx(quad.peak_stage.peak_bytes, rel=1e-9)
