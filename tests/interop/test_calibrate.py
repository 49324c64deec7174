"""`paraplan calibrate`: recover a synthetic cluster's known constants from its measurements, written
in the tools' own formats (issue 11 acceptance), and read real-format inputs strictly."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from paraplan.calibrate import calibrate, system_yaml
from paraplan.calibrate.fit import NIC_EFF, NIC_LAT, NIC_OVERLAP, NVLINK_OVERLAP
from paraplan.calibrate.readers import parse_nccl_tests, read_gemm_table, read_nccl_tests
from paraplan.calibrate.synthetic import BASE_SYSTEM, KERNEL_CAPS, TRUE_VALUES, write_samples
from paraplan.catalog import load_system
from paraplan.cli import main
from paraplan.specs.errors import InputError

SAMPLES = Path(__file__).resolve().parents[2] / "examples" / "calibration"


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("synthetic")
    write_samples(folder)
    return calibrate(
        load_system(BASE_SYSTEM),
        nccl=[str(p) for p in sorted(folder.glob("*_perf_*.txt"))],
        gemm=folder / "gemm.csv",
        attention=folder / "attention.csv",
        memory=folder / "memory.csv",
        steps=folder / "steps.yaml",
    )


def test_recovers_every_known_constant(fitted):
    base = load_system(BASE_SYSTEM)
    for path, true in TRUE_VALUES.items():
        got = fitted.values[path]
        if path in (NVLINK_OVERLAP, NIC_OVERLAP):
            assert got == pytest.approx(true, abs=2e-3), path  # step times are rounded to 1 µs
        else:
            assert got == pytest.approx(true, rel=1e-3), (
                path
            )  # nccl-tests prints µs with two decimals
    # the base differs from the truth, so the fit had work to do
    assert base.node.nvlink_efficiency != TRUE_VALUES["node.nvlink_efficiency"]
    # GEMM kernels timed alone give kernel caps; the in-step caps and the step ramp stay the base's
    # (its in-step rate is below the kernels': calibrate.keep_in_step_shares, keep_step_ramp)
    eff = fitted.system.accelerator.efficiency
    for path, true in KERNEL_CAPS.items():
        assert fitted.kernel_caps[path] == pytest.approx(true, rel=1e-3), path
    assert (eff.gemm, eff.gemm_fp8) == (
        base.accelerator.efficiency.gemm,
        base.accelerator.efficiency.gemm_fp8,
    )
    assert eff.gemm_ramp_s == base.accelerator.efficiency.gemm_ramp_s


def test_residuals_and_leave_one_out_are_small_on_exact_data(fitted):
    assert all(r.rms_rel < 2e-4 for r in fitted.residuals)
    assert fitted.leave_one_out["max_abs_error"] < 1e-4
    assert len(fitted.leave_one_out["runs"]) == 5


def test_system_yaml_loads_and_carries_provenance(fitted, tmp_path):
    path = tmp_path / "cal.yaml"
    path.write_text(system_yaml(fitted))
    system = load_system(str(path))
    assert system.node.nvlink_efficiency == pytest.approx(0.72, rel=1e-3)
    assert "paraplan calibrate" in system.sources[NIC_EFF]
    assert "Leave-one-out" in path.read_text()


def test_shipped_samples_are_the_synthetic_cluster(tmp_path):
    """The bundled micro-benchmark samples are what `paraplan calibrate --write-synthetic` writes (they
    depend only on cost/comm.py and cost/compute.py); the step times follow the whole estimator and
    are regenerated with it, so only their runs are compared here."""
    written = {p.name: p.read_text() for p in write_samples(tmp_path)}
    shipped = {
        p.name: p.read_text() for p in SAMPLES.iterdir() if p.is_file() and p.name != "README.md"
    }
    assert set(written) == set(shipped)
    for name in written:
        if name != "steps.yaml":
            assert written[name] == shipped[name], name
    assert [r["plan"] for r in yaml.safe_load(written["steps.yaml"])["runs"]] == [
        r["plan"] for r in yaml.safe_load(shipped["steps.yaml"])["runs"]
    ]


def test_nccl_reader_counts_ranks_and_nodes():
    run = read_nccl_tests(str(SAMPLES / "all_reduce_perf_4n32g.txt"))
    assert (run.kind, run.ranks, run.nodes) == ("all_reduce", 32, 4)
    assert run.sizes_bytes[0] == 8 and len(run.sizes_bytes) == 15
    # NCCL's tree all-reduce latency at the synthetic α (7 us NVLink, 18 us NIC): 2*(8-1)*7 + 2*log2(4)*18 = 170 us
    assert run.times_s[0] == pytest.approx(170.00e-6)
    named = read_nccl_tests(f"all_gather={SAMPLES / 'all_reduce_perf_1n8g.txt'}")
    assert named.kind == "all_gather"


def test_nccl_reader_refuses_other_text():
    with pytest.raises(InputError, match="Rank"):
        parse_nccl_tests("size time\n8 1.0\n", "all_reduce")


def test_only_one_node_leaves_the_network_unidentified():
    cal = calibrate(load_system(BASE_SYSTEM), nccl=[str(SAMPLES / "all_reduce_perf_1n8g.txt")])
    assert NIC_EFF not in cal.values and NIC_LAT not in cal.values
    assert "not identified" in cal.notes[NIC_EFF]
    assert cal.values["node.nvlink_efficiency"] == pytest.approx(0.72, rel=1e-3)


def test_gemm_table_accepts_tflops(tmp_path):
    path = tmp_path / "g.csv"
    path.write_text("m,n,k,dtype,tflops\n4096,4096,4096,bf16,500\n")
    (sample,) = read_gemm_table(path)
    assert sample.time_s == pytest.approx(2 * 4096**3 / 500e12)


def test_calibrate_cli_writes_a_system(tmp_path, capsys):
    out = tmp_path / "sys.yaml"
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "calibrate",
                "--system",
                BASE_SYSTEM,
                "--gemm",
                str(SAMPLES / "gemm.csv"),
                "--memory",
                str(SAMPLES / "memory.csv"),
                "--out",
                str(out),
            ]
        )
    assert exc.value.code in (0, None)
    written = load_system(str(out)).accelerator.efficiency
    # the in-step cap is the base's; the attached table's kernels, faster alone, get a share below 1
    assert written.gemm == load_system(BASE_SYSTEM).accelerator.efficiency.gemm
    assert 0.9 < written.table_in_step_share["gemm"] < 1.0
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--system", BASE_SYSTEM])
    assert exc.value.code == 2
    assert "nothing to fit" in capsys.readouterr().err


def test_flat_timings_leave_the_efficiency_unidentified(tmp_path):
    path = tmp_path / "mem.csv"
    # flat at 100 µs: 100 MB in 100 µs is 1 TB/s, within the peak (faster data are refused)
    path.write_text("bytes,time_us\n1000,100\n1000000,100\n100000000,100\n")
    cal = calibrate(load_system(BASE_SYSTEM), memory=path)
    assert "accelerator.efficiency.hbm" not in cal.values
    assert "not identified" in cal.notes["accelerator.efficiency.hbm"]
