"""Catalogs of well-known models and systems: one YAML file per entry, file stem = name.

Files are read lazily (never at import time) and validated by the same schemas as user inputs.
"""

from __future__ import annotations

import difflib
import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml
from pydantic import ValidationError

from paraplan.specs.errors import InputError, input_error_from_pydantic
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec


def _names(kind: str) -> list[str]:
    folder = resources.files("paraplan.catalog") / kind
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def model_names() -> list[str]:
    return _names("models")


def system_names() -> list[str]:
    return _names("systems")


def _unknown(kind: str, field: str, name: str, known: list[str]) -> InputError:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return InputError(f"{field}: unknown {kind} {name!r}{hint}; allowed: {', '.join(known)} or a YAML/JSON file")


@lru_cache(maxsize=None)
def _read_entry(kind: str, name: str) -> dict:
    text = (resources.files("paraplan.catalog") / kind / f"{name}.yaml").read_text()
    return yaml.safe_load(text)


def _read_file(path: Path, field: str) -> dict:
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"{field}: cannot read file {str(path)!r}: {exc.strerror}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"{field}: {str(path)!r} is not valid {path.suffix[1:] or 'YAML'}: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise InputError(f"{field}: {str(path)!r} must hold a mapping of fields")
    return data


def load_model(ref: str | dict | ModelSpec, field: str = "model") -> ModelSpec:
    """A catalog name, a path to YAML/JSON (our schema or a Hugging Face config.json), or a dict."""
    if isinstance(ref, ModelSpec):
        return ref
    if isinstance(ref, str):
        path = Path(ref)
        if ref in model_names():
            data = _read_entry("models", ref)
        elif path.suffix in (".yaml", ".yml", ".json") or path.exists():
            data = _read_file(path, field)
            from paraplan.hf import is_hf_config, model_from_hf_config

            if is_hf_config(data):
                name = path.parent.name if path.stem == "config" and path.parent.name else path.stem
                return model_from_hf_config(data, name=name, field=field)
            data.setdefault("name", path.stem)
        else:
            raise _unknown("model", field, ref, model_names())
    else:
        data = ref
    try:
        return ModelSpec.model_validate(data)
    except ValidationError as exc:
        raise input_error_from_pydantic(exc, field) from None


def load_system(ref: str | dict | SystemSpec, field: str = "system") -> SystemSpec:
    """A catalog name, a path to a YAML/JSON system file, or a dict."""
    if isinstance(ref, SystemSpec):
        return ref
    if isinstance(ref, str):
        path = Path(ref)
        if ref in system_names():
            data = _read_entry("systems", ref)
        elif path.suffix in (".yaml", ".yml", ".json") or path.exists():
            data = _read_file(path, field)
            data.setdefault("name", path.stem)
        else:
            raise _unknown("system", field, ref, system_names())
    else:
        data = ref
    try:
        return SystemSpec.model_validate(data)
    except ValidationError as exc:
        raise input_error_from_pydantic(exc, field) from None


def framework_names() -> list[str]:
    return _names("frameworks")


def load_framework(ref: "str | dict | FrameworkSpec", field: str = "framework") -> "FrameworkSpec":
    """A framework profile: a catalog name (``paraplan/catalog/frameworks``), a YAML/JSON path, or a dict."""
    from paraplan.specs.framework import FrameworkSpec

    if isinstance(ref, FrameworkSpec):
        return ref
    if isinstance(ref, str):
        path = Path(ref)
        if ref in framework_names():
            data = _read_entry("frameworks", ref)
        elif path.suffix in (".yaml", ".yml", ".json") or path.exists():
            data = _read_file(path, field)
            data.setdefault("name", path.stem)
        else:
            raise _unknown("framework", field, ref, framework_names())
    else:
        data = ref
    try:
        return FrameworkSpec.model_validate(data)
    except ValidationError as exc:
        raise input_error_from_pydantic(exc, field) from None
