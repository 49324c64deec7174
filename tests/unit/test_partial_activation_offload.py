"""Activation offload of only some layers (Megatron-LM --cpu-offloading-num-layers; plan field
offload_activation_layers): the share of the stage's layer activations kept in host memory, the rest on the GPU."""

from __future__ import annotations

import pytest

from paraplan.api import estimate
from paraplan.specs.errors import InputError

KW = dict(gpus=64, micro_batch=2, global_batch=256, seq_length=8192, dtype="fp8", zero=3)


@pytest.fixture(scope="module")
def runs():
    none = estimate("llama3-70b", "gb300-nvl72", **KW)
    every = estimate("llama3-70b", "gb300-nvl72", offload_activations=True, **KW)
    quarter = estimate(
        "llama3-70b", "gb300-nvl72", offload_activations=True, offload_activation_layers=20, **KW
    )
    return none, every, quarter


def test_share_of_the_layers_goes_to_the_host(runs):
    none, every, quarter = runs
    kept, staged = none.stages[0].activations_bytes, every.stages[0].activations_bytes
    # 20 of the stage's 80 layers offload: the host holds a quarter of what full offload puts there
    assert quarter.stages[0].host_bytes == pytest.approx(every.stages[0].host_bytes / 4)
    assert every.stages[0].host_bytes == pytest.approx(kept)
    # the GPU keeps the other three quarters plus the staging buffers full offload keeps
    assert quarter.stages[0].activations_bytes == pytest.approx(0.75 * kept + staged)
    assert (
        not none.fits and quarter.fits and not every.fits
    )  # full offload overflows the 223.5 GiB host


def test_all_layers_equals_plain_offload(runs):
    _, every, _ = runs
    same = estimate(
        "llama3-70b", "gb300-nvl72", offload_activations=True, offload_activation_layers=80, **KW
    )
    more = estimate(
        "llama3-70b", "gb300-nvl72", offload_activations=True, offload_activation_layers=500, **KW
    )
    for est in (same, more):
        assert est.step_time_s == every.step_time_s
        assert est.stages[0].peak_bytes == every.stages[0].peak_bytes
        assert est.stages[0].host_bytes == every.stages[0].host_bytes


def test_layers_without_offload_is_refused():
    with pytest.raises(InputError, match="offload_activation_layers"):
        estimate("llama3-70b", "gb300-nvl72", offload_activation_layers=20, **KW)


@pytest.mark.parametrize("value", [True, "3", 2.0, 0])
def test_layers_take_a_positive_integer_only(value):
    """No coercion: a bool, a string or a float is refused by name, as is a count below 1."""
    with pytest.raises(InputError, match="offload_activation_layers"):
        estimate(
            "llama3-70b",
            "gb300-nvl72",
            offload_activations=True,
            offload_activation_layers=value,
            **KW,
        )
