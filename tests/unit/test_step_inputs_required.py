"""StepInputs.param_gather_bytes has no default (review, issue 31): a builder that forgot it would have priced
the data-parallel weight all-gathers at the weights' bytes silently; every builder states it."""

from __future__ import annotations

import dataclasses

import pytest

from paraplan.catalog import load_system
from paraplan.step.constants import system_terms
from paraplan.step.inputs import StepInputs


def test_param_gather_bytes_is_required():
    field = {f.name: f for f in dataclasses.fields(StepInputs)}["param_gather_bytes"]
    assert field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
    with pytest.raises(TypeError, match="param_gather_bytes"):
        # every field before it, positionally: stages, pp, microbatches, gradient groups, knobs, host bandwidth,
        # HBM rate, weight, gradient, optimizer and reserved bytes
        StepInputs((), 1, 1, {}, None, 1.0, 1.0, 2.0, 4.0, 12.0, 0.0)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_the_system_terms_state_the_gather_bytes(dtype):
    """What both builders (step.layout.build_step_inputs, step.per_stage.stage_arrays) spread into StepInputs
    names the gather bytes: the weights' own outside fp8."""
    terms = system_terms(load_system("dgx-h100-80gb"), dtype)
    assert terms["param_gather_bytes"] == terms["weight_bytes"] == 2.0
