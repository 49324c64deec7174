"""`--set PATH=V1,V2` and `--gpus` parsing: numeric leaves only, unit strings as in the YAML, one-line errors."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.cli import main
from paraplan.specs.errors import InputError
from paraplan.sweep.params import (
    apply_overrides,
    check_axes,
    numeric_fields,
    parse_gpus,
    parse_set,
    parse_sets,
)


def test_numeric_fields_cover_system_and_model_leaves():
    fields = numeric_fields()
    for path in (
        "accelerator.hbm_bandwidth",
        "accelerator.hbm_capacity",
        "accelerator.matrix_flops.bf16",
        "accelerator.efficiency.gemm",
        "node.gpus_per_domain",
        "node.nvlink_bandwidth",
        "network.nic_bandwidth",
        "model.hidden",
        "model.layers",
    ):
        assert path in fields, path
    for path in (
        "name",
        "accelerator.name",
        "accelerator.gemm_tile",
        "model.mlp",
        "model.tie_embeddings",
        "sources",
    ):
        assert path not in fields, path


def test_set_values_take_yaml_units_and_plain_si_numbers():
    model, system = load_model("gpt3-1.3b"), load_system("dgx-a100-80gb")
    axis = parse_set("accelerator.hbm_bandwidth=2TB/s, 4 TB/s,8e12")
    assert axis.values == ("2TB/s", "4 TB/s", "8e12")
    rates = [
        apply_overrides(model, system, {axis.path: v})[1].accelerator.hbm_bandwidth
        for v in ("2TB/s", "4 TB/s", 8e12)
    ]
    assert rates == [2e12, 4e12, 8e12]
    _, s = apply_overrides(
        model, system, {"node.gpus_per_domain": 72, "accelerator.matrix_flops.bf16": "1 PFLOPS"}
    )
    assert s.node.gpus_per_domain == 72 and s.accelerator.peak_matrix_flops("bf16") == 1e15
    assert s.accelerator.hbm_capacity == system.accelerator.hbm_capacity  # the rest untouched
    m, _ = apply_overrides(model, system, {"model.layers": 48})
    assert m.layers == 48 and m.hidden == model.hidden


def test_bad_path_names_the_path_and_lists_the_allowed_fields():
    with pytest.raises(InputError) as err:
        parse_set("accelerator.hbm_bandwith=2TB/s")
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith("--set accelerator.hbm_bandwith: unknown field")
    assert "did you mean accelerator.hbm_bandwidth" in text
    assert (
        "allowed (numeric fields):" in text
        and "node.gpus_per_domain" in text
        and "model.hidden" in text
    )


def test_non_numeric_field_is_refused():
    for path in ("model.mlp", "accelerator.name", "name"):
        with pytest.raises(InputError) as err:
            parse_set(f"{path}=swiglu")
        assert str(err.value).startswith(
            f"--set {path}: not a numeric field; allowed (numeric fields):"
        )


def test_bad_unit_value_names_path_value_and_units():
    model, system = load_model("gpt3-1.3b"), load_system("dgx-a100-80gb")
    with pytest.raises(InputError) as err:
        check_axes(model, [system], [parse_set("accelerator.hbm_bandwidth=2TB/s,3 parsecs")])
    text = str(err.value)
    assert text.startswith(
        "--set accelerator.hbm_bandwidth: '3 parsecs' is not allowed for dgx-a100-80gb;"
    )
    assert "TB/s" in text and "\n" not in text
    with pytest.raises(
        InputError, match=r"--set node.gpus_per_domain: 0 is not allowed .*greater than 0"
    ):
        check_axes(model, [system], [parse_set("node.gpus_per_domain=8,0")])
    with pytest.raises(
        InputError, match=r"--set model.hidden: 1000 is not allowed for gpt3-1.3b; .*divisible"
    ):
        check_axes(model, [system], [parse_set("model.hidden=1000")])


def test_set_syntax_errors():
    with pytest.raises(InputError, match="PATH=VALUE"):
        parse_set("accelerator.hbm_bandwidth")
    with pytest.raises(InputError, match="no values"):
        parse_set("accelerator.hbm_bandwidth=")
    with pytest.raises(InputError, match="given twice"):
        parse_sets(["network.nic_bandwidth=100GB/s", "network.nic_bandwidth=200GB/s"])


def test_gpus_lists_and_geometric_ranges():
    assert parse_gpus("512,1024,2048") == (512, 1024, 2048)
    assert parse_gpus("256..16384x2") == (256, 512, 1024, 2048, 4096, 8192, 16384)
    assert parse_gpus("8..100x4") == (8, 32)
    assert parse_gpus("64..256x2,768") == (64, 128, 256, 768)
    for bad in ("256..16384", "0", "a,b", "16..8x2", "8..64x1", "8,8", ""):
        with pytest.raises(InputError, match="--gpus"):
            parse_gpus(bad)


def test_cli_errors_are_one_line_exit_2(capsys, tmp_path):
    base = [
        "sweep",
        "--model",
        "gpt3-1.3b",
        "--system",
        "dgx-a100-80gb",
        "--global-batch",
        "64",
        "--out",
        str(tmp_path / "out"),
    ]
    cases = {
        (
            "--set",
            "accelerator.hbm_bandwith=1TB/s",
        ): "--set accelerator.hbm_bandwith: unknown field",
        (
            "--set",
            "accelerator.hbm_bandwidth=2 furlongs/s",
        ): "--set accelerator.hbm_bandwidth: '2 furlongs/s'",
        ("--set", "model.norm=1"): "--set model.norm: not a numeric field",
        ("--gpus", "8..64"): "--gpus: '8..64' has no factor",
        ("--system", "dgx-z100"): "system: unknown system 'dgx-z100'",
    }
    for extra, start in cases.items():
        with pytest.raises(SystemExit) as exit_info:
            main([*base, *extra, *([] if "--gpus" in extra else ["--gpus", "8"])])
        _, err = capsys.readouterr()
        assert exit_info.value.code == 2, extra
        assert err.startswith(f"error: {start}"), err
        assert err.count("\n") == 1, err
