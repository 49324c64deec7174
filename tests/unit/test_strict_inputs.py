"""Input scalars are read as what they are (specs.strict.InputModel): a boolean is never a number, a number or a
string never a boolean, a string never a number; every input model refuses them naming the field."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

import paraplan.specs.cluster  # noqa: F401 (every input model is defined)
import paraplan.specs.framework  # noqa: F401
import paraplan.specs.model  # noqa: F401
import paraplan.specs.plan  # noqa: F401
import paraplan.specs.stage_plan  # noqa: F401
import paraplan.specs.system  # noqa: F401
from paraplan.specs.plan import PlanSpec
from paraplan.specs.strict import InputModel, _field_kinds

BASE = dict(gpus=8, seq_length=2048, tp=1, pp=1, dp=8, micro_batch=1, global_batch=64)
WRONG = {int: [True, "2"], float: [False, "1.5"], bool: [1, 0.0, "yes", "false"]}


def _models() -> list[type]:
    out, todo = [], [InputModel]
    while todo:
        for sub in todo.pop().__subclasses__():
            out.append(sub)
            todo.append(sub)
    return out


def test_every_input_model_refuses_scalars_of_another_kind_naming_the_field():
    """For every scalar field of every input model, a value of another kind is refused with the field's
    location and the rule (the other fields may fail for their own reasons: a dict with only that field)."""
    checked = 0
    for model in _models():
        for name in model.model_fields:
            for kind in _field_kinds(model, name):
                for value in WRONG[kind]:
                    with pytest.raises(ValidationError) as caught:
                        model.model_validate({name: value})
                    mine = [e for e in caught.value.errors() if e["loc"] == (name,)]
                    assert mine and "must be" in mine[0]["msg"], (
                        model.__name__,
                        name,
                        value,
                        caught.value.errors(),
                    )
                    checked += 1
    assert checked > 200


@pytest.mark.parametrize(
    "field, value",
    [
        ("tp", True),
        ("tp", "2"),
        ("micro_batch", "1"),
        ("zero", "1"),
        ("sequence_parallel", 1),
        ("sequence_parallel", "no"),
        ("overlap_tp_comm", "true"),
        ("recompute_num_layers", True),
        ("capacity_factor", True),
    ],
)
def test_plan_refuses_another_kind(field, value):
    with pytest.raises(ValidationError, match="must be"):
        PlanSpec(**{**BASE, field: value})


def test_plan_takes_numpy_scalars_and_integral_numbers_for_floats():
    """What the search builds plans from (numpy integers and booleans) and an int for a float field pass."""
    plan = PlanSpec(
        **{**BASE, "tp": np.int64(1), "sequence_parallel": np.bool_(False), "capacity_factor": 1}
    )
    assert plan.tp == 1 and plan.sequence_parallel is False and plan.capacity_factor == 1.0


def test_cli_names_the_field_of_a_plan_file(tmp_path, capsys):
    """A plan file with ``"tp": true`` is one line naming plan.tp, exit 2 (it used to run as tp 1)."""
    from paraplan.cli.main import main

    path = tmp_path / "plan.json"
    path.write_text(json.dumps({**BASE, "tp": True}))
    with pytest.raises(SystemExit) as exit_info:
        main(["estimate", "-m", "gpt3-1.3b", "-s", "dgx-a100-80gb", "--plan", str(path)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.strip().splitlines() == ["error: plan.tp: True is not allowed; must be an integer"]
