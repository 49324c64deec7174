"""calibrate's in-step rules (calibrate.in_step), the kinds it attaches (cost.table_refs) and the dense-row
expert loop of a table without grouped rows (cost.kernel_tables): a fit of some kernels moves only the
prices of the kernels it measured (issue 32)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
import yaml

from paraplan.calibrate import calibrate
from paraplan.catalog import load_system
from paraplan.cost import kernel_tables as kt
from paraplan.cost.compute import gemm_efficiency, gemm_time_s, grouped_gemm_time_s
from paraplan.specs.errors import InputError
from paraplan.specs.fields import with_fields

H100 = "h100-sxm5-80gb"
EFF = "accelerator.efficiency"


def shipped(name: str) -> Path:
    return Path(str(resources.files("paraplan.catalog") / "kernels" / name))


def scaled_copy(src: Path, dst: Path, factor: float, time_column: int = -1) -> Path:
    """``src`` with its time column × ``factor``, written with other bytes (not a shipped file)."""
    rows = src.read_text().splitlines()
    out = [rows[0]]
    for row in rows[1:]:
        cells = row.split(",")
        cells[time_column] = f"{float(cells[time_column]) * factor:.5f}"
        out.append(",".join(cells))
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("\n".join(out) + "\n")
    return dst


def test_a_table_reference_can_name_some_of_its_kinds():
    table = kt.load_table(f"{H100}[gemm,memory]")
    assert set(table.files) == {"gemm", "memory"}
    assert table.kernels == {} and table.grouped_gemm == {} and table.attention == {}
    with pytest.raises(InputError, match=r"kinds in \[...\] must be some of"):
        kt.load_table(f"{H100}[gemm,eager]")
    with pytest.raises(InputError, match="has no attention_fa3 file"):
        kt.load_table(f"{H100}[attention_fa3]")


def test_calibrate_attaches_only_the_kinds_it_was_given():
    folder = shipped(H100)
    cal = calibrate(load_system("dgx-h100-80gb"), gemm=folder / "gemm.csv")
    assert cal.system.accelerator.kernel_tables == f"{H100}[gemm]"
    acc = cal.system.accelerator
    # no eager kernels, fp8 quantisation kernels or attention from the shipped table's other files
    table = kt.load_table(acc.kernel_tables, acc.l2_cache)
    assert table.kernels == {} and table.attention == {} and table.memory is None


def test_a_bf16_grouped_gemm_without_grouped_rows_is_the_dense_rows_expert_loop():
    base = load_system("dgx-h100-80gb")
    dense = with_fields(base, {"accelerator.kernel_tables": f"{H100}[gemm]"}).accelerator
    experts, m, n, k = 8, 2048, 4096, 1024
    flops = experts * 2.0 * m * n * k
    ramps = 2 * dense.efficiency.gemm_ramp_s  # ceil(8 experts / 4 streams)
    one = gemm_time_s(2.0 * m * n * k, (1, m, n, k), dense, "bf16") - dense.efficiency.gemm_ramp_s
    loop = grouped_gemm_time_s(flops, (experts, m, n, k), dense, "bf16")
    assert loop - ramps == pytest.approx(experts * one, rel=1e-12)
    # fp8 per-expert GEMMs (no fp8 rows): the bf16 loop less the fitted share s of the speed-up of the analytical
    # dense fp8 loop (cost.compute.te_multistream_grouped_s; validate.fitted moe.grouped_gemm_fp8, at its bound 0)
    shape = (experts, m, n, k)
    fp8_loop = flops / (
        dense.peak_matrix_flops("fp8") * gemm_efficiency(1, m, n, k, dense, "fp8")
    ) + 2 * (dense.efficiency.gemm_ramp_s + dense.efficiency.kernel_overhead_s)
    s = dense.efficiency.grouped_gemm_fp8
    assert s == 0.0 and fp8_loop < loop
    assert grouped_gemm_time_s(flops, shape, dense, "fp8") == pytest.approx(
        loop - s * (loop - fp8_loop)
    )


def test_a_gemm_table_attached_keeps_the_caps_and_a_slower_one_shares_one(tmp_path):
    """Attached, the caps price only what the table did not measure: the base's; a table slower than the
    base's in-step rate (r > 1) is used as measured (share 1), a faster one divided by its share r."""
    base = load_system("dgx-h100-80gb")
    slow = scaled_copy(shipped(H100) / "gemm.csv", tmp_path / "slow" / "gemm.csv", 1.5)
    cal = calibrate(base, gemm=slow, tables_dir=tmp_path / "t")
    kt.clear_caches()
    eff = cal.system.accelerator.efficiency
    assert eff.table_in_step_share == {"gemm": 1.0, "gemm_fp8": 1.0}
    assert (eff.gemm, eff.gemm_fp8) == (base.accelerator.efficiency.gemm, 0.56)
    fp32 = gemm_time_s(2.0 * 4096**3, (1, 4096, 4096, 4096), cal.system.accelerator, "fp32")
    assert fp32 == gemm_time_s(2.0 * 4096**3, (1, 4096, 4096, 4096), base.accelerator, "fp32")


def test_a_gemm_table_not_attached_scales_the_cap_by_the_slower_rate(tmp_path):
    """Not attached (not shipped files, no -o), the caps price the table's dtypes: B·min(1, 1/r)."""
    base = load_system("dgx-h100-80gb")
    same = scaled_copy(shipped(H100) / "gemm.csv", tmp_path / "same" / "gemm.csv", 1.0)
    slow = scaled_copy(shipped(H100) / "gemm.csv", tmp_path / "slow" / "gemm.csv", 1.5)
    fast, slower = calibrate(base, gemm=same), calibrate(base, gemm=slow)
    assert fast.system.accelerator.kernel_tables is None
    for key in ("gemm", "gemm_fp8"):
        assert slower.kernel_caps[f"{EFF}.{key}"] == pytest.approx(
            fast.kernel_caps[f"{EFF}.{key}"] / 1.5, rel=0.02
        )
    fast_eff, slow_eff = fast.system.accelerator.efficiency, slower.system.accelerator.efficiency
    # this H100's bf16 kernels are slower than the catalog's in-step rate already (r > 1): cap / 1.5;
    # its fp8 kernels are faster (r < 1): the base cap kept, and base / (1.5 r) once 1.5 r > 1
    assert fast_eff.gemm < base.accelerator.efficiency.gemm
    assert slow_eff.gemm == pytest.approx(fast_eff.gemm / 1.5, rel=1e-6)
    assert fast_eff.gemm_fp8 == base.accelerator.efficiency.gemm_fp8
    assert slow_eff.gemm_fp8 < fast_eff.gemm_fp8


def test_copies_faster_than_the_base_in_step_rate_keep_it_and_stay_out(tmp_path):
    base = load_system("dgx-h100-80gb")
    cal = calibrate(base, memory=shipped(H100) / "memory.csv", tables_dir=tmp_path / "t")
    eff = cal.system.accelerator.efficiency
    assert (eff.hbm, eff.kernel_overhead_s) == (0.85, 4e-6)
    assert cal.system.accelerator.kernel_tables is None  # nothing else given: nothing attached
    assert cal.kernel_caps[f"{EFF}.hbm"] > 0.85  # the copies alone, reported
    assert "not attached" in cal.notes["accelerator.kernel_tables (memory)"]


def test_copies_slower_than_the_base_in_step_rate_replace_it_and_are_attached(tmp_path):
    base = load_system("dgx-h100-80gb")
    slow = scaled_copy(shipped(H100) / "memory.csv", tmp_path / "m" / "memory.csv", 1.25)
    cal = calibrate(base, memory=slow, tables_dir=tmp_path / "t")
    kt.clear_caches()
    eff = cal.system.accelerator.efficiency
    assert eff.hbm == pytest.approx(cal.kernel_caps[f"{EFF}.hbm"]) and eff.hbm < 0.85
    assert cal.system.accelerator.kernel_tables == str((tmp_path / "t").resolve())
    files = yaml.safe_load((tmp_path / "t" / "table.yaml").read_text())["files"]
    assert files == {"memory": "memory.csv"}


@pytest.mark.parametrize("attached", [False, True])
def test_steps_fit_the_in_step_share_only_when_asked(attached):
    """``--fit-in-step-share``: the step times fit the in-step GEMM share (of the attached table, else the
    cap) with the overlap costs; without it the share stays as calibrated."""
    from paraplan.calibrate.steps import fit_steps
    from paraplan.calibrate.synthetic import step_runs, true_system

    system = true_system()
    if attached:
        system = with_fields(system, {"accelerator.kernel_tables": f"{H100}[gemm]"})
        path, truth = f"{EFF}.table_in_step_share.gemm", 0.9
    else:
        path, truth = f"{EFF}.gemm", 0.70
    runs = step_runs(with_fields(system, {path: truth}))
    part, loo = fit_steps(runs, system, "steps.yaml", in_step_share=True)
    assert part.values[path] == pytest.approx(truth, rel=1e-3)
    assert "fitted to the step times" in part.notes[path]
    assert loo["max_abs_error"] < 2e-3
    plain, _ = fit_steps(runs, system, "steps.yaml")
    assert path not in plain.values


def test_a_folder_whose_name_ends_in_brackets_is_that_folder(tmp_path):
    import shutil

    folder = tmp_path / "mine[gemm]"
    shutil.copytree(shipped(H100), folder)
    assert set(kt.load_table(str(folder)).files) == set(kt.load_table(H100).files)
    assert set(kt.load_table(f"{folder}[memory]").files) == {"memory"}


def _attention_rel_errors(cal, csv: Path) -> list[float]:
    from paraplan.calibrate.fit import attention_flops
    from paraplan.calibrate.readers import read_attention_table
    from paraplan.cost.compute import attention_time_s

    acc = cal.system.accelerator
    return [
        attention_time_s(*attention_flops(r), acc, r.dtype) / r.time_s - 1.0
        for r in read_attention_table(csv)
    ]


@pytest.mark.parametrize("with_memory", [True, False])
def test_the_system_prices_the_attention_rows_at_the_overhead_they_were_fitted_with(
    tmp_path, with_memory
):
    """Kernels alone with a 2 µs overhead, base 4 µs: the base's in-step overhead is kept, and the
    attention fraction is fitted at it, so the returned system reproduces the attention rows within the
    residual calibrate reports for them (the clamp used to run after the attention fit)."""
    from paraplan.calibrate import synthetic as syn
    from paraplan.calibrate.fit import with_values

    base = load_system(syn.BASE_SYSTEM)
    assert base.accelerator.efficiency.kernel_overhead_s == pytest.approx(4e-6)
    true = with_values(base, {**syn.TRUE_VALUES, f"{EFF}.kernel_overhead_s": 2e-6})
    (tmp_path / "memory.csv").write_text(syn.memory_csv(true))
    (tmp_path / "attn_fa3.csv").write_text(syn.attention_csv(true))
    memory = tmp_path / "memory.csv" if with_memory else None
    cal = calibrate(base, memory=memory, attention=tmp_path / "attn_fa3.csv")
    assert cal.system.accelerator.efficiency.kernel_overhead_s == pytest.approx(4e-6)
    assert cal.kernel_caps[f"{EFF}.kernel_overhead_s"] == pytest.approx(2e-6, rel=1e-3)
    (res,) = [r for r in cal.residuals if r.source == "attn_fa3.csv"]
    errors = _attention_rel_errors(cal, tmp_path / "attn_fa3.csv")
    assert max(abs(e) for e in errors) == pytest.approx(res.max_rel, rel=1e-6)
    assert res.max_rel > 1e-3  # the 2 µs gap shows in the residual, not hidden by a refit overhead
