"""paraplan.api: names, paths, dicts and specs in; the CLI's plan defaults."""

from __future__ import annotations

import pytest
import yaml

from paraplan import api
from paraplan.catalog import load_model, load_system
from paraplan.specs.errors import InputError
from paraplan.specs.plan import PlanSpec


def test_names_dicts_specs_and_paths_agree(tmp_path):
    by_name = api.estimate("llama3-8b", "dgx-h100-80gb", gpus=8, zero=1)
    model = load_model("llama3-8b")
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(model.model_dump(exclude={"name"})))
    by_spec = api.estimate(model, load_system("dgx-h100-80gb"), PlanSpec(gpus=8, zero=1, global_batch=8, seq_length=2048))
    by_dict = api.estimate(model.model_dump(), "dgx-h100-80gb", {"gpus": 8, "zero": 1})
    by_path = api.estimate(path, "dgx-h100-80gb", gpus=8, zero=1)
    for other in (by_spec, by_dict, by_path):
        assert other.step_time_s == pytest.approx(by_name.step_time_s)
        assert other.first_stage.peak_bytes == pytest.approx(by_name.first_stage.peak_bytes)


def test_default_global_batch():
    assert api.default_global_batch({"gpus": 64, "tp": 8, "pp": 2}) == 4
    assert api.default_global_batch({"gpus": 64, "tp": 8, "pp": 2, "vpp": 2}) == 8  # interleaved: ·pp
    assert api.default_global_batch({"gpus": 64, "tp": 8, "pp": 2, "micro_batch": 2, "schedule": "interleaved"}) == 16
    assert api.default_global_batch({"gpus": 6, "tp": 4, "micro_batch": 3}) == 3  # dp unknown: let plan.gpus report it


def test_plan_errors_are_one_line():
    with pytest.raises(InputError) as info:
        api.estimate("llama3-8b", "dgx-h100-80gb", gpus=8, placement="dp-tp")
    assert "placement" in str(info.value) and "{" not in str(info.value)
    with pytest.raises(InputError, match="plan.gpus"):
        api.estimate("llama3-8b", "dgx-h100-80gb", gpus=0)


def test_with_ops_and_validate():
    est = api.estimate("llama3-8b", "dgx-h100-80gb", gpus=8, zero=1, with_ops=True)
    assert est.ops and est.to_dict(include_ops=True)["ops"]
    report = api.validate()
    assert set(report) == {"cases", "summary"} and report["summary"]["cases"] == len(report["cases"])
