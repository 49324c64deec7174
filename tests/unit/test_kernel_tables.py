"""Measured kernel tables (cost.kernel_tables): interpolation rules, calibrate attaching them, and
step times that never drop when a measured kernel gets slower (issue 32)."""

from __future__ import annotations

import json
import random
import shutil
from importlib import resources
from pathlib import Path

import pytest
import yaml

from paraplan.calibrate import calibrate, system_yaml
from paraplan.calibrate.tables import with_attention_kernel
from paraplan.catalog import load_model, load_system, system_names
from paraplan.cli import main
from paraplan.cost import kernel_tables as kt
from paraplan.cost.compute import gemm_time_s, memory_time_s
from paraplan.specs.errors import InputError
from paraplan.specs.fields import with_fields
from paraplan.specs.plan import PlanSpec
from paraplan.specs.system import SystemSpec
from paraplan.step.estimate import estimate
from paraplan.validate.tables import table_residuals, with_tables

H100 = "h100-sxm5-80gb"


def shipped(name: str) -> Path:
    return Path(str(resources.files("paraplan.catalog") / "kernels" / name))


def attached(system: SystemSpec, ref: str) -> SystemSpec:
    acc = system.accelerator.model_copy(update={"kernel_tables": ref})
    return SystemSpec.model_validate({**system.model_dump(), "accelerator": acc.model_dump()})


def test_every_shipped_table_has_provenance_and_a_catalog_accelerator():
    names = kt.shipped_tables()
    assert {H100, "h200-sxm-141gb"} <= set(names)
    catalog_gpus = {load_system(n).accelerator.name for n in system_names()}
    for name in names:
        prov = kt.table_provenance(name)
        for key in ("device", "software", "date", "source"):
            assert prov.get(key), (name, key)
        assert set(prov["accelerators"]) <= catalog_gpus


def test_measured_shapes_are_reproduced_and_outside_shapes_clamp_to_the_edge_rate():
    acc = attached(load_system("dgx-h100-80gb"), H100).accelerator
    ramp = acc.efficiency.gemm_ramp_s  # the step-level per-GEMM cost added to the kernel's time

    def kernel(b, m, n, k):
        return gemm_time_s(2.0 * b * m * n * k, (b, m, n, k), acc, "bf16") - ramp

    # 8192^3 bf16 measured: 673 TFLOP/s (shared README) -> its own time back
    assert 2.0 * 8192**3 / kernel(1, 8192, 8192, 8192) / 1e12 == pytest.approx(673, rel=0.01)
    # beyond the measured box every coordinate clamps to its edge: the same rate, time by work
    big, edge = kernel(1, 2**21, 2**21, 2**21), kernel(1, 2**20, 2**20, 2**20)
    assert big == pytest.approx(8 * edge, rel=1e-9)
    # a GEMM far below the table runs no faster than the fastest measured GEMM (launch floor)
    floor = kt.load_table(H100, acc.l2_cache).gemm["bf16"].floor_s
    assert kernel(1, 64, 64, 64) == pytest.approx(floor)
    # tf32 has no table rows: the analytical form prices it
    analytic = load_system("dgx-h100-80gb").accelerator
    shape = (1, 4096, 4096, 4096)
    assert gemm_time_s(2.0 * 4096**3, shape, acc, "fp32") == gemm_time_s(
        2.0 * 4096**3, shape, analytic, "fp32"
    )


def test_cache_resident_copies_set_only_the_floor():
    acc = attached(load_system("dgx-h100-80gb"), H100).accelerator
    table = kt.load_table(H100, acc.l2_cache)
    assert table.memory_cache_rows == 3  # 2, 8 and 32 MiB moved fit in the 50 MB L2
    # 32 MiB moved is priced at the HBM rate of the smallest HBM-resident copy, not from L2
    rate_128 = 134217728 / 47.6327e-6
    assert memory_time_s(33554432, acc) == pytest.approx(33554432 / rate_128, rel=1e-9)
    assert memory_time_s(1024, acc) == pytest.approx(6.6736e-6)  # launch floor


def test_an_unknown_table_is_refused_naming_the_field():
    system = attached(load_system("dgx-h100-80gb"), "no-such-table")
    with pytest.raises(InputError, match="accelerator.kernel_tables: unknown kernel table"):
        gemm_time_s(1e12, (1, 4096, 4096, 4096), system.accelerator, "bf16")


def test_calibrate_fits_the_shared_h100_tables_within_5_percent():
    folder = shipped(H100)
    cal = calibrate(
        load_system("dgx-h100-80gb"),
        gemm=folder / "gemm.csv",
        attention=folder / "attention_cudnn.csv",
        memory=folder / "memory.csv",
    )
    # the shipped files: attached by name, only the kinds given; the copies, faster alone than the base's
    # in-step memory rate, are fitted and reported but not attached (calibrate.in_step)
    assert cal.system.accelerator.kernel_tables == f"{H100}[gemm,attention_cudnn]"
    attached_rows = [r for r in cal.residuals if r.what.endswith("attached table")]
    assert {r.source for r in attached_rows} == {"gemm.csv", "attention_cudnn.csv"}
    (copies,) = [r for r in cal.residuals if r.source == "memory.csv"]
    for r in [*attached_rows, copies]:
        assert r.rms_rel <= 0.05, r
    # the L2 rule, not a loosened refusal: the cache-resident copies are named and left out
    assert "3 of 7 rows" in cal.notes["accelerator.efficiency.hbm"]
    assert f"kernel_tables: {H100}[gemm,attention_cudnn]" in system_yaml(cal)
    # the step-level GEMM ramp is the base system's, not the table's fixed time
    assert cal.system.accelerator.efficiency.gemm_ramp_s == pytest.approx(40e-6)


def test_calibrate_writes_other_tables_next_to_the_system_and_they_load(tmp_path):
    src = tmp_path / "measured"
    shutil.copytree(shipped(H100), src)
    rows = (src / "gemm.csv").read_text().splitlines()
    (src / "gemm.csv").write_text("\n".join(rows[:1] + [r + "0" for r in rows[1:]]) + "\n")
    out = tmp_path / "out" / "mine.yaml"
    # same values, other bytes: not the shipped files, so the tables are written next to --out
    with pytest.raises(SystemExit, match="0"):
        main(
            [
                "calibrate",
                "-s",
                "dgx-h100-80gb",
                "--gemm",
                str(src / "gemm.csv"),
                "--attention",
                str(src / "attention_flash.csv"),
                "--report",
                str(tmp_path / "fit.json"),
                "-o",
                str(out),
            ]
        )
    system = load_system(str(out))
    assert system.accelerator.kernel_tables == str((tmp_path / "out" / "mine-kernels").resolve())
    assert system.accelerator.efficiency.attention_kernel == "fa2"  # what the file measured
    for r in table_residuals(system):
        if r.what.endswith("attached table"):
            assert r.rms_rel <= 0.05, r
    report = json.loads((tmp_path / "fit.json").read_text())
    assert any("attached table" in r["what"] for r in report["residuals"])
    kt.clear_caches()


def test_systems_tables_lists_every_catalog_system_and_every_shipped_table(capsys):
    """Issue 32: every catalog accelerator has a table or says it uses the analytical fallback, and every
    shipped table is listed, a100-pcie-simumax (measured on no catalog GPU) among them."""
    with pytest.raises(SystemExit, match="0"):
        main(["systems", "--tables", "--json"])
    listing = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in listing["systems"]}
    assert set(rows) == set(system_names())
    assert rows["dgx-h100-80gb"]["kernel_tables"] == [H100, "nd-h100-v5-cublaslt"]
    assert rows["dgx-a100-80gb"]["kernel_tables"] == ["nd-a100-v4-cublaslt"]
    assert rows["dgx-a100-80gb"]["prices_with"].startswith("analytical (table opt-in")
    assert rows["mi355x-8"]["prices_with"] == "analytical fallback"  # no table measured on it
    assert all(r["prices_with"].startswith(("table ", "analytical")) for r in listing["systems"])
    tables = {t["table"]: t for t in listing["tables"]}
    assert list(tables) == kt.shipped_tables()
    assert tables["a100-pcie-simumax"]["status"].startswith("not attached to any catalog system")
    assert tables[H100]["opt_in"] == ["dgx-h100-80gb"] and not tables[H100]["attached_by_default"]
    v100 = tables["v100-sxm2-deepbench"]
    assert v100["attached_by_default"] == [
        "aws-p3.16xlarge",
        "aws-p3.8xlarge",
        "dgx-1-v100",
        "dgx-2h",
    ]
    with pytest.raises(SystemExit, match="0"):
        main(["systems", "--tables", "--width", "200"])
    out = capsys.readouterr().out
    for name in kt.shipped_tables():
        assert any(line.startswith(name + " ") for line in out.splitlines()), name


# ---- property: a slower measured kernel never makes a step faster ------------------------------
TIME_COLUMNS = {"gemm": "time_us", "grouped_gemm": "loop_time_us", "memory": "time_us"}
PLANS = (
    ("llama3-8b", dict(gpus=8, tp=1, pp=1, micro_batch=1, global_batch=64, seq_length=8192)),
    ("llama3-8b", dict(gpus=8, tp=2, pp=1, micro_batch=2, global_batch=64, seq_length=4096)),
    ("gpt3-1.3b", dict(gpus=8, tp=1, pp=2, micro_batch=4, global_batch=64, seq_length=2048)),
    # ep 4: two local experts, a grouped GEMM (one local expert is the dense GEMM, issue 33)
    (
        "mixtral-8x7b",
        dict(gpus=8, tp=1, pp=1, ep=4, micro_batch=1, global_batch=64, seq_length=4096, zero=1),
    ),
)


def slowed_copy(src: Path, dst: Path, kind_file: str, column: str, factor: float, rng) -> None:
    """The table at ``src`` copied to ``dst`` with ``column`` of ``kind_file`` multiplied by
    ``factor`` in every row, or in one row (seeded choice) when rng is given."""
    shutil.copytree(src, dst)
    lines = (dst / kind_file).read_text().splitlines()
    header = lines[0].split(",")
    col = header.index(column)
    chosen = {rng.randrange(1, len(lines))} if rng else set(range(1, len(lines)))
    for i in chosen:
        cells = lines[i].split(",")
        cells[col] = repr(float(cells[col]) * factor)
        lines[i] = ",".join(cells)
    (dst / kind_file).write_text("\n".join(lines) + "\n")


# One catalog system per shipped table that prices a catalog part (the opt-in ones attached as
# validate.tables.with_tables attaches them; the V100 table is attached by default, and dgx-2h reads it
# at the ratio of the datasheet peaks), with the plan knobs the part needs: V100 has no bf16 and no
# FlashAttention-2 (specs.rules_precision).
TABLE_SYSTEMS = {
    "dgx-h100-80gb": {},
    "dgx-h200": {},
    "dgx-b200": {},
    "gb200-nvl72": {},
    "gb300-nvl72": {},
    "dgx-a100-80gb": {},  # the Azure ND A100 v4 fp16 cuBLASLt rows, read as bf16
    "mi300x-8": {"dtype": "fp8"},  # the Azure ND MI300X v5 hipBLASLt rows: fp8 only
    "aws-p3.16xlarge": {"dtype": "fp16", "attention": "unfused"},
    "dgx-2h": {"dtype": "fp16", "attention": "unfused"},
    "dgx-h800": {
        "dtype": "fp8"
    },  # DeepGEMM's fp8 m-grouped rates, read by the deepgemm implementation
}
# system fields a table's kernels need: h800-deepgemm is read only by the deepgemm grouped GEMMs
SYSTEM_FIELDS = {"dgx-h800": {"accelerator.efficiency.runtime.grouped_gemm": "deepgemm"}}


def table_system(name: str) -> SystemSpec:
    """The catalog system with its table: attached by default, else the opt-in one attached; with the
    SYSTEM_FIELDS the table's kernels need."""
    system = with_fields(load_system(name), SYSTEM_FIELDS.get(name, {}))
    return system if system.accelerator.kernel_tables else with_tables(system)


def test_the_property_covers_every_table_a_catalog_system_can_read():
    read = {table_system(n).accelerator.kernel_tables for n in TABLE_SYSTEMS}
    can_read = set()
    for name in system_names():
        system = load_system(name)
        ref = system.accelerator.kernel_tables or kt.tables_measured_on(system.accelerator.name)
        if ref:
            can_read.add(ref if isinstance(ref, str) else ref[0])
    assert can_read <= read, can_read - read


@pytest.mark.parametrize("system_name", sorted(TABLE_SYSTEMS))
def test_step_time_never_decreases_when_a_table_kernel_gets_slower(tmp_path, system_name):
    rng = random.Random(32)
    base = table_system(system_name)
    assert base is not None
    ref = base.accelerator.kernel_tables
    folder = shipped(ref)
    files = yaml.safe_load((folder / "table.yaml").read_text())["files"]
    cases = [(load_model(m), PlanSpec(**{**p, **TABLE_SYSTEMS[system_name]})) for m, p in PLANS]
    for kind, file in files.items():
        column = TIME_COLUMNS.get(kind, "time_us")
        if kind in ("kernels", "fp8_kernels"):  # eager and fp8 steps: test_kernel_tables_eager.py
            continue
        if kind.startswith("attention_"):  # the system runs the kernel this table measured
            base = with_attention_kernel(base, kind.split("_", 1)[1])
        before = [estimate(m, base, p).step_time_s for m, p in cases]
        for trial, one_row in enumerate((False, True, True)):
            dst = tmp_path / f"{kind}-{trial}"
            slowed_copy(folder, dst, file, column, 1.25, rng if one_row else None)
            slow = attached(base, str(dst))
            after = [estimate(m, slow, p).step_time_s for m, p in cases]
            for b, a in zip(before, after):
                assert a >= b * (1 - 1e-12), (kind, trial, b, a)
            if not one_row:  # every kind the table holds is read by some step
                assert any(a > b * (1 + 1e-6) for b, a in zip(before, after)), kind
    kt.clear_caches()


@pytest.mark.parametrize(
    "table_yaml, gemm_csv, message",
    [
        ("files: [\n", None, "table.yaml is not YAML"),
        ("device: x\n", None, "needs 'files"),
        ("files: {gemm: gone.csv}\n", None, "cannot read 'gone.csv'"),
        ("files: {gemms: gemm.csv}\n", "m,n,k,dtype,time_us\n", "unknown kinds"),
        (
            "files: {gemm: gemm.csv}\n",
            "m,n,k,dtype,time_us\n8,8,x,bf16,3\n",
            "'k' must be a number",
        ),
        ("files: {gemm: gemm.csv}\n", "m,n,k,dtype,time_us\n8,8,8,bf16,0\n", "finite positive"),
    ],
)
def test_a_bad_table_folder_is_one_input_error_naming_the_field(
    tmp_path, table_yaml, gemm_csv, message
):
    (tmp_path / "table.yaml").write_text(table_yaml)
    if gemm_csv is not None:
        (tmp_path / "gemm.csv").write_text(gemm_csv)
    acc = attached(load_system("dgx-h100-80gb"), str(tmp_path)).accelerator
    with pytest.raises(InputError, match="accelerator.kernel_tables") as err:
        gemm_time_s(1e12, (1, 4096, 4096, 4096), acc, "bf16")
    assert message in str(err.value)
    kt.clear_caches()
