"""A sweep definition document (sweep.definition): the ``sweep`` object paraplan sweep writes reads
back as the same SweepConfig, and each bad field is one line naming it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from paraplan.specs.errors import InputError
from paraplan.sweep.definition import sweep_config
from paraplan.sweep.params import parse_sets
from paraplan.sweep.run import SweepConfig

CONFIG = SweepConfig(
    model="gpt3-13b",
    systems=("dgx-a100-80gb", "dgx-h100-80gb"),
    gpus=(32, 64),
    seq_length=4096,
    sets=tuple(parse_sets(["accelerator.hbm_bandwidth=2TB/s,3TB/s"])),
    max_global_batch=512,
    top=3,
    objective="cost",
    no_offload=True,
    restrictions={"tp": (1, 2), "recompute": ("none", "full")},
    tokens=3e11,
    vary_split=True,
)


def test_the_written_definition_reads_back_as_the_same_config():
    assert sweep_config(CONFIG.to_dict()) == CONFIG
    assert sweep_config({"sweep": CONFIG.to_dict(), "points": []}) == CONFIG  # a sweep.json
    assert sweep_config({**CONFIG.to_dict(), "gpus": "32..64x2"}) == CONFIG


@pytest.mark.parametrize(
    "change, message",
    [
        ({"gpus": [0]}, "sweep.gpus: [0] must list positive integers"),
        ({"top": "3"}, "sweep.top: '3' is not an integer"),
        ({"no_offload": "yes"}, "sweep.no_offload: 'yes' is not true or false"),
        ({"objective": "time-to-train"}, "sweep.objective: 'time-to-train' is not allowed"),
        ({"restrictions": {"ep": [1]}}, "sweep.restrictions: unknown axis 'ep'"),
        ({"sets": [{"path": "model.colour", "values": [1]}]}, "--set model.colour: unknown field"),
        ({"systems": None}, "sweep.systems: missing"),
        (
            {"systems": ["dgx-a100-80gb"] * 2},
            "sweep.systems: 'dgx-a100-80gb,dgx-a100-80gb' repeats",
        ),
        (
            {"max_global_batch": None},
            "sweep.global_batch: give exactly one of sweep.global_batch or",
        ),
        ({"tokens": -1.0}, "sweep.tokens: -1.0 is not allowed"),
        ({"gpus": [2**21]}, "sweep.gpus: 2097152 is not allowed; must be an integer from 1 to"),
        ({"max_global_batch": 2**25}, "sweep.max_global_batch: 33554432 is not allowed"),
        ({"max_global_batch": 0}, "sweep.max_global_batch: 0 is not allowed; must be an integer"),
        ({"seq_length": -1}, "sweep.seq_length: -1 is not allowed; must be an integer from 1 to"),
        ({"model": "/etc/passwd"}, "sweep.model: '/etc/passwd' is not in the catalog"),
    ],
)
def test_a_bad_field_is_one_line_naming_it(change, message):
    names = {"models": ["gpt3-13b"], "systems": list(CONFIG.systems), "frameworks": []}
    with pytest.raises(InputError) as err:
        sweep_config({**CONFIG.to_dict(), **change}, names)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"objective": "time-to-train"}, "--objective: 'time-to-train' is not allowed"),
        ({"restrictions": {"ep": (1,)}}, "--restrictions: unknown axis 'ep'"),
        ({"systems": ()}, "--system: give at least one system"),
        ({"max_global_batch": 0}, "--max-global-batch: 0 is not allowed"),
        ({"top": 101}, "--top: 101 is not allowed; must be an integer from 1 to 100"),
    ],
)
def test_the_command_line_config_is_checked_by_the_same_rules_naming_its_options(change, message):
    """paraplan sweep and a definition document share SweepConfig.check; the command names options."""
    with pytest.raises(InputError) as err:
        replace(CONFIG, **change).check()
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
