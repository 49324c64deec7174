"""Issue 32: the Azure AI-benchmarking-guide GEMM sweeps (catalog/kernels/nd-*, written by
benchmarks/azure/gemm_tables.py from the results files saved in benchmarks/azure/sources) as opt-in kernel tables:
each loads with its provenance, a hand-checked row's time is 2·m·n·k / (TFLOPS·1e12), a system with the table
attached prices that GEMM's kernel at it, and no catalog system or existing table default changes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from paraplan.catalog import load_system, system_names
from paraplan.cost import kernel_tables as kt
from paraplan.cost.compute import gemm_kernel_time_s
from paraplan.specs.fields import with_fields

ROOT = Path(__file__).resolve().parents[2]
# table -> (catalog system, its accelerator, a published row m, n, k, dtype, TFLOPS, and the hand-computed
# time 2·m·n·k / (TFLOPS·1e12) in us)
TABLES = {
    "nd-gb300-v6-cublaslt": (
        "gb300-nvl72",
        "B300-GB300-288GB",
        (8192, 8192, 8192, "fp8", 3286.3, 334.574),  # 1.0995e12 FLOP / 3286.3e12
    ),
    "nd-gb200-v6-cublaslt": (
        "gb200-nvl72",
        "B200-GB200-186GB",
        (6144, 12288, 12288, "fp8", 2798.7, 662.960),  # 1.8554e12 / 2798.7e12
    ),
    "nd-h100-v5-cublaslt": (
        "dgx-h100-80gb",
        "H100-SXM5-80GB",
        (16384, 16384, 16384, "fp8", 1377.3, 6386.48),  # 8.7961e12 / 1377.3e12
    ),
    "nd-h200-v5-cublaslt": (
        "dgx-h200",
        "H200-SXM-141GB",
        (4096, 4096, 4096, "fp8", 1249.2, 110.022),  # 1.3744e11 / 1249.2e12
    ),
    "nd-mi300x-v5-hipblaslt": (
        "mi300x-8",
        "MI300X-OAM-192GB",
        (8192, 8192, 8192, "fp8", 1222.9, 899.102),  # 1.0995e12 / 1222.9e12
    ),
    "nd-a100-v4-cublaslt": (
        "dgx-a100-80gb",
        "A100-SXM4-80GB",
        (6144, 12288, 12288, "fp16", 250.8, 7398.03),  # 1.8554e12 / 250.8e12
    ),
}


def _writer():
    path = ROOT / "benchmarks" / "azure" / "gemm_tables.py"
    spec = importlib.util.spec_from_file_location("azure_gemm_tables", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_table_loads_with_its_provenance(name):
    _, accelerator, _ = TABLES[name]
    assert name in kt.shipped_tables()
    prov = kt.table_provenance(name)
    for key in ("device", "software", "date", "source"):
        assert prov.get(key), (name, key)
    assert "AI-benchmarking-guide" in prov["source"]
    assert prov["accelerators"] == [accelerator]
    table = kt.load_table(name)
    assert list(table.files) == ["gemm"]
    rows = table.rows["gemm"]
    assert 8 <= len(rows) <= 9 and all(r["source"].startswith("ND_") for r in rows)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_a_published_row_is_its_rate_inverted_and_priced_as_measured(name):
    system, _, (m, n, k, dtype, tflops, hand_us) = TABLES[name]
    flops = 2.0 * m * n * k
    assert flops / (tflops * 1e12) * 1e6 == pytest.approx(hand_us, rel=1e-5)
    row = next(
        r
        for r in kt.load_table(name).rows["gemm"]
        if (int(r["m"]), int(r["n"]), int(r["k"])) == (m, n, k)
    )
    assert (row["dtype"], float(row["tflops"])) == (dtype, tflops)
    assert float(row["time_us"]) == pytest.approx(hand_us, rel=1e-5)
    # attached, a measured shape returns its own rate (cost.kernel_tables), at in-step share 1
    acc = with_fields(load_system(system), {"accelerator.kernel_tables": name}).accelerator
    assert gemm_kernel_time_s(flops, (1, m, n, k), acc, dtype) == pytest.approx(
        hand_us * 1e-6, rel=1e-5
    )


def test_the_writer_reproduces_the_shipped_csvs_from_the_saved_results_files():
    writer = _writer()
    sources = ROOT / "benchmarks" / "azure" / "sources"
    kernels = ROOT / "src" / "paraplan" / "catalog" / "kernels"
    assert set(writer.TABLES.values()) == set(TABLES)
    for file, table in writer.TABLES.items():
        lines = writer.table_lines((sources / file).read_text(encoding="utf-8"), file)
        shipped = (kernels / table / "gemm.csv").read_text(encoding="utf-8")
        assert "\n".join(lines) + "\n" == shipped, table


def test_the_writer_skips_the_fp4_sections():
    writer = _writer()
    text = (ROOT / "benchmarks/azure/sources/ND_GB300_v6_results-18e80a2.md").read_text("utf-8")
    rows = writer.gemm_rows(text, "ND_GB300_v6_results-18e80a2.md")
    assert {r[3] for r in rows} == {"fp8"} and len(rows) == 9
    assert rows[0][:5] == (1024, 1024, 1024, "fp8", 553.5)


def test_the_tables_are_opt_in_and_leave_each_gpus_first_table_unchanged():
    """No catalog system attaches an nd-* table, and each GPU's first shipped table (the one
    validate.tables.with_tables attaches for docs/validation.md's step-time comparison) is unchanged."""
    for name in system_names():
        assert not str(load_system(name).accelerator.kernel_tables or "").startswith("nd-")
    assert kt.tables_measured_on("H100-SXM5-80GB")[0] == "h100-sxm5-80gb"
    assert kt.tables_measured_on("H200-SXM-141GB")[0] == "h200-sxm-141gb"
    assert kt.tables_measured_on("B200-GB200-186GB")[0] == "gb200-cudnn-sdpa"
    assert kt.tables_measured_on("B300-GB300-288GB")[0] == "gb300-cudnn-sdpa"
