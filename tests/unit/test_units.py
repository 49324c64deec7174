"""parse_quantity: unit strings to SI, and one-line errors naming the field and the allowed units."""

import pytest

from paraplan.catalog import load_system
from paraplan.specs.errors import InputError
from paraplan.units import ALLOWED_UNITS, GiB, UnitError, parse_quantity


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("80 GiB", 80 * 2**30),
        ("80GiB", 80 * 2**30),
        ("80 GB", 80e9),
        ("141 GB", 141e9),
        ("512 MiB", 512 * 2**20),
        ("1.5 TiB", 1.5 * 2**40),
        ("2 TB", 2e12),
        ("4 KB", 4e3),
        ("8 Gb", 1e9),
        ("100 B", 100.0),
    ],
)
def test_bytes(text, expected):
    assert parse_quantity(text, "bytes") == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3.35 TB/s", 3.35e12),
        ("2039 GB/s", 2.039e12),
        ("400 Gb/s", 50e9),
        ("400 Gbps", 50e9),
        ("200 Gb/s", 25e9),
        ("900 GB/s", 900e9),
        ("1 GiB/s", 2**30),
        ("1.6 Tb/s", 200e9),
        ("25 GBps", 25e9),
    ],
)
def test_bandwidth(text, expected):
    assert parse_quantity(text, "bandwidth") == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("989 TFLOPS", 989e12),
        ("989.4 TFLOPS", 989.4e12),
        ("2.25 PFLOPS", 2.25e15),
        ("19.5 TFLOP/s", 19.5e12),
        ("500 GFLOPS", 500e9),
        ("1e15 FLOPS", 1e15),
    ],
)
def test_flops(text, expected):
    assert parse_quantity(text, "flops") == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10 us", 10e-6),
        ("10us", 10e-6),
        ("5 µs", 5e-6),
        ("2 ms", 2e-3),
        ("300 ns", 300e-9),
        ("1.5 s", 1.5),
        ("2 min", 120.0),
        ("1 h", 3600.0),
    ],
)
def test_time(text, expected):
    assert parse_quantity(text, "time") == pytest.approx(expected, rel=1e-12)


def test_plain_numbers_are_already_si():
    assert parse_quantity(85899345920, "bytes") == 85899345920.0
    assert parse_quantity(3.35e12, "bandwidth") == 3.35e12
    assert parse_quantity(4e-6, "time") == 4e-6
    assert parse_quantity("7", "count") == 7.0
    assert GiB == 2**30


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("80 GHz", "bytes"),
        ("3.35 TB", "bandwidth"),
        ("989 TB/s", "flops"),
        ("10 parsecs", "time"),
        ("fast", "bandwidth"),
        ("", "bytes"),
        ("80", "bytes"),
    ],
)
def test_errors_name_field_and_allowed_units(text, kind):
    with pytest.raises(UnitError) as info:
        parse_quantity(text, kind, field="accelerator.hbm_capacity")
    message = str(info.value)
    assert message.startswith("accelerator.hbm_capacity: ")
    assert repr(text) in message
    assert ALLOWED_UNITS[kind] in message
    assert "\n" not in message


@pytest.mark.parametrize("value", [True, None, [80], {"GiB": 80}])
def test_non_quantities_are_rejected(value):
    with pytest.raises(UnitError, match=r"^speed: .*allowed units: "):
        parse_quantity(value, "bandwidth", field="speed")


def test_unit_error_is_a_value_error():
    assert issubclass(UnitError, ValueError)


def test_bad_unit_in_a_system_becomes_one_line_input_error():
    data = {
        "accelerator": {
            "name": "x",
            "matrix_flops": {"bf16": "989 TFLOPS"},
            "vector_flops": {"fp32": "67 TFLOPS"},
            "hbm_capacity": "80 GHz",
            "hbm_bandwidth": "3.35 TB/s",
            "sm_count": 132,
        },
        "node": {"gpus_per_domain": 8, "nvlink_bandwidth": "450 GB/s"},
        "network": {"nic_bandwidth": "400 Gb/s"},
    }
    with pytest.raises(InputError) as info:
        load_system(data)
    message = str(info.value)
    assert message.startswith("system.accelerator.hbm_capacity: ")
    assert "GiB" in message and "\n" not in message


def test_units_reach_the_spec_in_si():
    system = load_system("dgx-h100-80gb")
    assert system.accelerator.hbm_capacity == 80 * 2**30
    assert system.accelerator.hbm_bandwidth == pytest.approx(3.35e12)
    assert system.network.nic_bandwidth == pytest.approx(50e9)
    assert system.accelerator.matrix_flops["bf16"] == pytest.approx(989.4e12)
    assert system.node.nvlink_latency == pytest.approx(5e-6)
