"""Catalogs of well-known models and systems: one YAML file per entry, file stem = name.

Files are read lazily (never at import time) and validated by the same schemas as user inputs.
"""

from __future__ import annotations

import difflib
import os
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from paraplan.catalog import hf_cache as _hub
from paraplan.io.catalog_files import catalog_folder, catalog_names
from paraplan.io.parsed_cache import parsed
from paraplan.specs.checked import Spec, validate_spec
from paraplan.specs.errors import InputError, UnknownNameError, input_error_from_pydantic
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec


def _names(kind: str) -> list[str]:
    return list(catalog_names(kind))


def model_names() -> list[str]:
    return _names("models")


def system_names() -> list[str]:
    return _names("systems")


def suggestions(name: str, known: list[str], n: int = 3) -> list[str]:
    """Catalog names closest to ``name``: names that contain it (or its parts) first, then by
    similarity (``h100`` -> ``dgx-h100-80gb``, ``llama3_8b`` -> ``llama3-8b``)."""
    wanted = name.lower().replace("_", "-").strip()
    if not wanted:
        return []
    parts = [p for p in wanted.replace(" ", "-").split("-") if p]
    scored = []
    for candidate in known:
        c = candidate.lower()
        ratio = difflib.SequenceMatcher(None, wanted, c).ratio()
        contained = wanted in c or (len(parts) > 1 and all(p in c for p in parts))
        if contained or ratio >= 0.5:
            scored.append((0 if contained else 1, -ratio, len(c), candidate))
    return [c for *_, c in sorted(scored)[:n]]


def unknown_keyword(where: str, given, known, noun: str = "keyword it takes") -> InputError | None:
    """The error for the first of ``given`` not in ``known`` (keyword arguments of an API call), naming the
    closest known ones (did you mean ...?); None when every keyword is known."""
    unknown = sorted(set(given) - set(known))
    if not unknown:
        return None
    close = difflib.get_close_matches(unknown[0], sorted(known), n=3, cutoff=0.6)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return InputError(
        f"{where}: {unknown[0]!r} is not a {noun}{hint}; allowed: {', '.join(sorted(known))}"
    )


def _unknown(kind: str, field: str, name: str, known: list[str]) -> UnknownNameError:
    close = suggestions(name, known)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return UnknownNameError(
        f"{field}: unknown {kind} {name!r}{hint}; allowed: {', '.join(known)} or a YAML/JSON file"
    )


@lru_cache(maxsize=None)
def _read_entry(kind: str, name: str) -> dict:
    """The catalog file ``kind/name.yaml`` parsed, from the user's cache of parsed entries when a process parsed
    the same text before (io.parsed_cache: no YAML parser loaded then, issue 31)."""
    text = (catalog_folder(kind) / f"{name}.yaml").read_text(encoding="utf-8")
    return parsed(
        text, partial(_parse_entry, label=repr(f"{kind}/{name}.yaml"), field=kind), "strict"
    )


def _parse_entry(text: str, label: str, field: str) -> dict:
    from paraplan.io.documents import parse_document  # here: a cached entry needs no YAML parser

    return parse_document(text, label, field, as_json=False)


@lru_cache(maxsize=None)
def _catalog_spec(schema: type[Spec], kind: str, name: str, field: str) -> Spec:
    """A catalog entry validated once per process (the specs are frozen: one instance serves every caller; an
    estimate through the API by names no longer validates the model and the system again each time)."""
    return validate_spec(schema, _read_entry(kind, name), field)


def _read_file(path: Path | str, field: str, referenced: bool = False) -> dict:
    from paraplan.io.documents import read_document

    data = read_document(path, field, referenced)
    if not isinstance(data, dict):
        label = "standard input" if str(path) == "-" else repr(str(path))
        raise InputError(f"{field}: {label} must hold a mapping of fields")
    return data


def _model_path(ref: str) -> Path | str:
    """``-`` (stdin), a file, or a checkpoint directory holding a config.json."""
    if ref == "-":
        return ref
    path = Path(ref)
    if path.is_dir():
        config = path / "config.json"
        if not config.is_file():
            raise InputError(
                f"model: {ref!r} is a directory without a config.json; give a model file or a checkpoint directory"
            )
        return config
    return path


def load_model(
    ref: str | dict | ModelSpec, field: str = "model", referenced: bool = False
) -> ModelSpec:
    """A catalog name, a path to YAML/JSON (our schema or a Hugging Face config.json), or a dict of
    either (a Hugging Face config named "custom", as a model of our schema that names no name).
    ``referenced``: ``ref`` was named by a document (a case, a cluster, a plan), not by the user on
    the command line: a file it names is checked and reported by path and reason only
    (:func:`referenced_file_error`), never by its content."""
    if isinstance(ref, ModelSpec):
        return ref
    if isinstance(ref, str):
        if ref in catalog_names("models"):
            _refuse_shadowing("model", field, ref)
            return _catalog_spec(ModelSpec, "models", ref, field)
        path = Path(ref)
        if ref == "-" or path.suffix in (".yaml", ".yml", ".json") or path.exists():
            try:
                return _model_from_file(ref, field, referenced)
            except InputError as exc:
                raise referenced_file_error(exc, ref, field, "model") if referenced else exc
        if not referenced and _hub.is_hub_id(ref):
            config = _hub.cached_config(ref, field)
            if config is None:
                raise _hub.not_cached(ref, field)
            from paraplan.catalog.hf import model_from_hf_config

            return model_from_hf_config(_read_file(config, field), name=ref, field=field)
        raise _unknown("model", field, ref, model_names())
    if isinstance(ref, dict):  # our schema or a Hugging Face config.json, as a file or pasted text
        return model_from_data(dict(ref), ModelSpec.model_fields["name"].default, field)
    return validate_spec(ModelSpec, ref, field)


def _refuse_shadowing(kind: str, field: str, name: str) -> None:
    """A catalog name that is also a file or folder in the working directory is ambiguous: refused, naming
    both readings, rather than the catalog entry silently shadowing the user's file."""
    if os.path.exists(name):  # os.path: a quarter of pathlib's cost, on every estimate by name
        raise InputError(
            f"{field}: {name!r} is both a catalog {kind} and a path in this directory; give "
            f"'./{name}' to read the path, or run from another directory to use the catalog entry"
        )


def model_from_data(data: dict, name: str, field: str, hf_name: str | None = None) -> ModelSpec:
    """A model from a parsed document: a Hugging Face config.json (named ``hf_name``, else ``name``)
    or our schema (named ``name`` unless it names itself)."""
    from paraplan.catalog.hf import is_hf_config, model_from_hf_config

    if is_hf_config(data):
        return model_from_hf_config(data, name=hf_name or name, field=field)
    data.setdefault("name", name)
    return validate_spec(ModelSpec, data, field)


def _model_from_file(ref: str, field: str, referenced: bool) -> ModelSpec:
    """The model in a file (our schema, or a Hugging Face config.json named after its folder)."""
    source = _model_path(ref)
    data = _read_file(source, field, referenced)
    stem = "stdin" if source == "-" else Path(source).stem
    parent = Path(source).resolve().parent.name if source != "-" else ""
    return model_from_data(data, stem, field, parent if stem == "config" and parent else stem)


def referenced_file_error(exc: InputError, path: str, field: str, kind: str) -> InputError:
    """``exc`` (a failure to read or validate the ``kind`` file at ``path``, which a document named)
    as one line that names the path and the reason only: the missing schema fields, how many fields
    are unknown and the other rules broken — never a key or a value of the file."""
    if not exc.violations:  # reading or parsing: read_document(referenced=True) says no content
        return exc
    missing = [v.field.rsplit(".", 1)[-1] for v in exc.violations if v.rule == "Field required"]
    unknown = sum(v.rule == "unknown field" for v in exc.violations)
    others = dict.fromkeys(
        v.rule for v in exc.violations if v.rule not in ("Field required", "unknown field")
    )
    reasons = ([f"missing {', '.join(missing)}"] if missing else []) + (
        [f"{unknown} unknown field{'s' if unknown > 1 else ''}"] if unknown else []
    )
    reasons += list(others)[:3]
    return InputError(
        f"{field}: {path!r} is not a valid {kind} file ({'; '.join(reasons)}); its content is not"
        f" shown because a document named it: give it on the command line to see each field",
        exc.violations,
    )


def load_system(
    ref: str | dict | SystemSpec, field: str = "system", referenced: bool = False
) -> SystemSpec:
    """A catalog name, a path to a YAML/JSON system file, or a dict (``referenced``: see load_model)."""
    if isinstance(ref, SystemSpec):
        return ref
    if isinstance(ref, str) and ref in catalog_names("systems"):
        _refuse_shadowing("system", field, ref)
        return _catalog_spec(SystemSpec, "systems", ref, field)
    try:
        data = _entry_data("systems", "system", ref, field, referenced)
        return validate_spec(SystemSpec, data, field)
    except InputError as exc:
        if referenced and isinstance(ref, str) and not isinstance(exc, UnknownNameError):
            raise referenced_file_error(exc, ref, field, "system") from None
        raise


def _entry_data(
    kind: str, label: str, ref: str | dict, field: str, referenced: bool = False
) -> dict:
    """The data of a catalog entry (by name), of a YAML/JSON file (named after its stem), or the dict itself."""
    if not isinstance(ref, str):
        return ref
    path = Path(ref)
    names = _names(kind)
    if ref in names:
        return _read_entry(kind, ref)
    if path.suffix in (".yaml", ".yml", ".json") or path.exists():
        data = _read_file(path, field, referenced)
        data.setdefault("name", path.stem)
        return data
    raise _unknown(label, field, ref, names)


def framework_names() -> list[str]:
    return _names("frameworks")


# the stack profiles the fitted constants were calibrated under (framework_stack)
MEGATRON_FAMILY = ("megatron-core", "megatron-lm-2021")
MEGATRON_STACK = "megatron"  # the stack of the Megatron-LM family profiles, and of no profile


@lru_cache(maxsize=64)
def _catalog_chain(name: str) -> tuple[str, ...]:
    """``name`` and the catalog profiles its ``base`` chain walks to, the root last (_base_chain, the walk
    _over_base merges); a name the catalog does not have is a chain of its own."""
    if name not in framework_names():
        return (name,)
    chain = _base_chain(_read_entry("frameworks", name), "framework")
    return (name, *(data["base"] for data in chain[:-1]))


def framework_chain(framework: "str | FrameworkSpec | None") -> tuple[str, ...]:
    """The names along a profile's ``base`` chain (framework_stack, search.launch.launcher; the walk is
    _base_chain's): the profile's name first, then each ``base`` to the root. A catalog name walks the
    catalog profiles; a
    FrameworkSpec (a profile given as a file) names its own ``base`` first, whose chain the catalog then
    walks; no profile: the empty chain."""
    if framework is None:
        return ()
    if isinstance(framework, str):
        return _catalog_chain(framework)
    return (framework.name, *framework_chain(framework.base))


def framework_stack(framework: "str | FrameworkSpec | None") -> str:
    """The software stack a framework profile runs, the one mapping of a profile to a stack (the
    recomputation modes a search varies, search.launch.recompute_modes; the stack an error band is
    conditioned on, validate.features.band_keys): the stack profile at the root of the profile's
    ``base`` chain (framework_chain; a recipe profile runs the stack it refines: torchtitan-compiled ->
    torchtitan, megatron-deepspeed -> deepspeed, a file with ``base: torchtitan`` -> torchtitan). The
    Megatron-LM family (MEGATRON_FAMILY, and the recipes built on it: nemo-24.09, megatron-bridge-*) and
    no profile are one stack, MEGATRON_STACK: the defaults a plan without a profile takes are
    Megatron-LM's, and the fitted constants were calibrated under these profiles. A name the catalog
    does not have, without a base, is its own stack."""
    chain = framework_chain(framework)
    if not chain or any(name in MEGATRON_FAMILY for name in chain):
        return MEGATRON_STACK
    return chain[-1]


# what a profile says of itself, never taken from its base (_over_base)
_OWN_FIELDS = ("name", "base", "source", "description", "version")


def _base_chain(data: dict, field: str) -> list[dict]:
    """The one walk of a profile's ``base`` chain: ``data`` and the data of each catalog profile its
    ``base`` names, then that profile's base, to the root (a profile without a string ``base``), last.
    A base must name a catalog profile (else UnknownNameError with the closest names); a chain that
    comes back to a profile it has passed (by name) is refused."""
    chain, names = [data], framework_names()
    while isinstance(chain[-1], dict) and isinstance(chain[-1].get("base"), str):
        base = chain[-1]["base"]
        if base not in names:
            raise _unknown("framework", f"{field}.base", base, names)
        seen = [str(entry.get("name")) for entry in chain]
        if base in seen:
            raise InputError(f"{field}.base: the profiles' base chain loops ({' -> '.join(seen)})")
        chain.append(_read_entry("frameworks", base))
    return chain


def _over_base(data: Any, field: str) -> Any:
    """A profile's data over its base's, the one inheritance of framework profiles (catalog entries,
    files and dicts alike): every field the profile does not state is its ``base``'s, itself resolved
    the same way up the chain (_base_chain), and ``sources`` merge per field; what a profile says of
    itself (_OWN_FIELDS) stays its own. A recipe states where it departs from its stack, so a file
    ``{name: my-titan, base: torchtitan}`` is torchtitan under another name. A base must name a
    catalog profile; no base (or a value the schema refuses): the data as given."""
    if not isinstance(data, dict) or not isinstance(data.get("base"), str):
        return data
    chain = _base_chain(data, field)
    merged = chain[-1]
    for child in reversed(chain[:-1]):
        parent = merged
        merged = {k: v for k, v in parent.items() if k not in _OWN_FIELDS}
        merged.update(child)
        sources = child.get("sources", {})
        if isinstance(sources, dict) and isinstance(parent.get("sources"), dict):
            merged["sources"] = {**parent["sources"], **sources}
    return merged


def load_framework(
    ref: "str | dict | FrameworkSpec", field: str = "framework", referenced: bool = False
) -> "FrameworkSpec":
    """A framework profile: a catalog name (``paraplan/catalog/frameworks``), a YAML/JSON path, or a
    dict (``referenced``: a path a document names, see load_model)."""
    from paraplan.specs.framework import FrameworkSpec

    if isinstance(ref, FrameworkSpec):
        return ref
    try:
        data = _over_base(_entry_data("frameworks", "framework", ref, field, referenced), field)
        try:
            return FrameworkSpec.model_validate(data)
        except ValidationError as exc:
            raise input_error_from_pydantic(exc, field, FrameworkSpec) from None
    except InputError as exc:
        if referenced and isinstance(ref, str) and not isinstance(exc, UnknownNameError):
            raise referenced_file_error(exc, ref, field, "framework") from None
        raise
