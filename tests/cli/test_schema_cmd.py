"""`paraplan schema NAME`: JSON Schemas of the input files that accept what paraplan accepts."""

from __future__ import annotations

import json
from importlib import resources

import pytest
import yaml

from paraplan.cli import main
from paraplan.io.schemas import schema_models


def run(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return (exit_info.value.code or 0), out, err


def schema(capsys, name: str) -> dict:
    code, out, err = run(capsys, "schema", name)
    assert code == 0, err
    return json.loads(out)


def catalog_files(kind: str) -> list:
    folder = resources.files("paraplan.catalog") / kind
    return sorted((p for p in folder.iterdir() if p.name.endswith(".yaml")), key=lambda p: p.name)


def test_every_schema_is_a_json_schema_with_the_fields(capsys):
    assert (
        list(schema_models())[:3] == ["model", "system", "plan"]
        and "validation-case" in schema_models()
    )
    model = schema(capsys, "model")
    assert model["$schema"].endswith("2020-12/schema")
    assert {"layers", "hidden", "heads", "ffn_hidden", "vocab"} <= set(model["required"])
    assert model["additionalProperties"] is False
    plan = schema(capsys, "plan")
    assert plan["properties"]["recompute"]["enum"] == ["none", "selective", "full"]
    assert plan["properties"]["tp"]["exclusiveMinimum"] == 0
    case = schema(capsys, "validation-case")
    assert case["required"] == ["cases"]
    item = case["$defs"]["ValidationCase"]
    assert {"name", "source", "model", "system", "plan", "measured"} <= set(item["required"])


def test_quantities_accept_numbers_and_unit_strings(capsys):
    accelerator = schema(capsys, "system")["$defs"]["AcceleratorSpec"]["properties"]
    branches = accelerator["hbm_capacity"]["anyOf"]
    assert {"type": "number", "exclusiveMinimum": 0} in branches
    assert any(b["type"] == "string" and "GiB" in b["description"] for b in branches)
    text = json.dumps(schema(capsys, "system"))
    assert '"gt"' not in text and '"ge"' not in text  # only JSON Schema keywords


def test_catalog_and_bundled_case_files_validate_against_the_schemas(capsys):
    jsonschema = pytest.importorskip("jsonschema")

    def checker(spec):
        """What ``jsonschema.validate(instance, spec)`` does, the schema checked against its
        metaschema once rather than once per instance."""
        cls = jsonschema.validators.validator_for(spec)
        cls.check_schema(spec)
        return cls(spec)

    for kind, name in (("models", "model"), ("systems", "system")):
        spec = checker(schema(capsys, name))
        for path in catalog_files(kind):
            spec.validate(yaml.safe_load(path.read_text()))
    case = checker(schema(capsys, "validation-case"))
    folder = resources.files("paraplan.validate") / "cases"
    files = [p for p in folder.iterdir() if p.name.endswith(".json")]
    assert files
    for path in files:
        case.validate(json.loads(path.read_text()))
    bad = {
        "cases": [
            {
                "name": "x",
                "source": "y",
                "model": "gpt3-1.3b",
                "system": "dgx-a100-80gb",
                "plan": {"gpus": 8, "global_batch": 8, "seq_length": 2048, "tp": 0},
                "measured": {},
            }
        ]
    }
    with pytest.raises(jsonschema.ValidationError):
        case.validate(bad)


def test_unknown_schema_is_one_line_with_a_suggestion(capsys, tmp_path):
    code, out, err = run(capsys, "schema", "sytem")
    assert code == 2 and out == ""
    assert (
        err.startswith("error: schema: unknown schema 'sytem' (did you mean system?)")
        and err.count("\n") == 1
    )
    path = tmp_path / "plan.schema.json"
    code, out, _ = run(capsys, "schema", "plan", "--out", str(path))
    assert code == 0 and json.loads(path.read_text())["$id"] == "paraplan:plan"
