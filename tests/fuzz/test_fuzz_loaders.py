"""Hypothesis over the file loaders (derandomized): whatever the bytes or the structure of a model,
system or validation-case file, loading either succeeds or raises one InputError of one line."""

from __future__ import annotations

import json
import math

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paraplan.catalog import load_model, load_system
from paraplan.specs.errors import InputError
from paraplan.validate.case_files import load_cases

FUZZ = settings(
    max_examples=80,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

MODEL = json.loads(load_model("gpt3-125m").model_dump_json())
SYSTEM = json.loads(load_system("dgx-a100-80gb").model_dump_json())

HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([0, -1, 1, 2**31, 2**63, 10**30, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e-300, 1e300, -0.0, 0.5]),
    st.text(max_size=12),
    st.sampled_from(["4544", "false", "80 GiB", "inf GB/s", "1e-300 TB/s", "\x1b[31m", ""]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


def check_one_line(load, path) -> None:
    try:
        load(str(path))
    except InputError as exc:
        message = str(exc)
        assert message and "\n" not in message and "Traceback" not in message


def leaves(data, prefix=()):
    """Every key path of a nested dict."""
    for key, value in data.items():
        yield (*prefix, key)
        if isinstance(value, dict):
            yield from leaves(value, (*prefix, key))


def with_value(data: dict, path: tuple, value) -> dict:
    data = json.loads(json.dumps(data))
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


def dump(data, suffix: str) -> str:
    if suffix == ".json":
        return json.dumps(data, allow_nan=True, default=str)
    return (
        yaml.safe_dump(data, allow_unicode=False)
        if _yaml_safe(data)
        else json.dumps(data, default=str)
    )


def _yaml_safe(data) -> bool:
    try:
        yaml.safe_dump(data)
        return True
    except (yaml.YAMLError, OverflowError, ValueError):
        return False


@FUZZ
@given(content=st.binary(max_size=600), suffix=st.sampled_from([".json", ".yaml"]))
def test_random_bytes(tmp_path_factory, content, suffix):
    path = tmp_path_factory.mktemp("bytes") / f"f{suffix}"
    path.write_bytes(content)
    for load in (load_model, load_system, load_cases_of):
        check_one_line(load, path)


@FUZZ
@given(data=st.data(), suffix=st.sampled_from([".json", ".yaml"]))
def test_one_hostile_field_in_a_model_or_system(tmp_path_factory, data, suffix):
    base, load = data.draw(st.sampled_from([(MODEL, load_model), (SYSTEM, load_system)]))
    field = data.draw(st.sampled_from(sorted(leaves(base))))
    value = data.draw(HOSTILE)
    if isinstance(value, int) and abs(value) > 10**300:
        value = str(
            value
        )  # JSON/YAML writers cannot hold it as a number; as text it must still fail cleanly
    path = tmp_path_factory.mktemp("field") / f"spec{suffix}"
    path.write_text(dump(with_value(base, field, value), suffix))
    check_one_line(load, path)


@FUZZ
@given(
    structure=st.recursive(
        HOSTILE,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(
                st.sampled_from(
                    [
                        "layers",
                        "hidden",
                        "cases",
                        "model",
                        "accelerator",
                        "name",
                        "measured",
                        "plan",
                        "x",
                    ]
                ),
                inner,
                max_size=4,
            ),
        ),
        max_leaves=20,
    )
)
def test_random_structures(tmp_path_factory, structure):
    if isinstance(structure, float) and not math.isfinite(structure):
        structure = {"layers": structure}
    path = tmp_path_factory.mktemp("struct") / "doc.json"
    try:
        path.write_text(json.dumps(structure, allow_nan=True))
    except (TypeError, ValueError):
        return
    for load in (load_model, load_system, load_cases_of):
        check_one_line(load, path)


def load_cases_of(path: str):
    return load_cases([path])
