"""io.parsed_cache: parsed catalog entries kept between processes (issue 31), exact and never stale."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from pathlib import Path

import pytest

from paraplan.io import parsed_cache
from paraplan.io.catalog_files import catalog_folder, catalog_names
from paraplan.io.documents import parse_document
from paraplan.specs.errors import InputError


@pytest.fixture()
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("PARAPLAN_CACHE_DIR", str(tmp_path))
    return tmp_path / "catalog"


def _counting(result):
    calls = []

    def parse(text):
        calls.append(text)
        return result(text) if callable(result) else result

    return parse, calls


def _typed(value):
    """``value`` with every leaf's type beside it: 1 and 1.0 and True differ."""
    if isinstance(value, dict):
        return [(k, _typed(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


def test_a_parse_is_kept_and_read_back_as_it_was(folder):
    data = {"b": 1, "a": [1.0, True, None, "x", {"n": -(2**40), "f": 1e-300}], "z": False}
    parse, calls = _counting(data)
    assert parsed_cache.parsed("text", parse, "p") is data
    again = parsed_cache.parsed("text", parse, "p")
    assert calls == ["text"]  # the second from the file
    assert _typed(again) == _typed(data) and list(again) == ["b", "a", "z"]
    assert [p.name for p in folder.iterdir()] == [parsed_cache.entry_key("text", "p") + ".marshal"]


def test_an_edited_entry_is_parsed_afresh(folder):
    parse, calls = _counting(lambda text: {"value": len(text)})
    assert parsed_cache.parsed("a: 1\n", parse, "p") == {"value": 5}
    assert parsed_cache.parsed("a: 12\n", parse, "p") == {"value": 6}
    assert calls == ["a: 1\n", "a: 12\n"]
    assert len(list(folder.iterdir())) == 2


def test_the_key_covers_the_parser(monkeypatch):
    # the same text under another parser (its name, this package's io sources, PyYAML's files, Python) is
    # another file
    key = parsed_cache.entry_key("a: 1\n", "strict")
    assert key == parsed_cache.entry_key("a: 1\n", "strict")
    assert key != parsed_cache.entry_key("a: 2\n", "strict")
    assert key != parsed_cache.entry_key("a: 1\n", "packaged")
    stamp = parsed_cache.parser_stamp()
    assert b"strict_yaml.py" in stamp and b"__init__.py:" in stamp and sys.version.encode() in stamp
    monkeypatch.setattr(parsed_cache, "parser_stamp", lambda: stamp + b"another parser")
    assert parsed_cache.entry_key("a: 1\n", "strict") != key


def test_an_unwritable_folder_only_means_nothing_is_kept(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("PARAPLAN_CACHE_DIR", str(blocker))
    parse, calls = _counting({"a": 1})
    assert parsed_cache.parsed("t", parse, "p") == {"a": 1}
    assert parsed_cache.parsed("t", parse, "p") == {"a": 1}
    assert calls == ["t", "t"] and blocker.read_text() == "not a folder"


def test_a_damaged_file_is_parsed_again_and_replaced(folder):
    parse, calls = _counting({"a": [1, 2, 3]})
    parsed_cache.parsed("t", parse, "p")
    path = folder / (parsed_cache.entry_key("t", "p") + ".marshal")
    path.write_bytes(path.read_bytes()[:5])  # truncated
    assert parsed_cache.parsed("t", parse, "p") == {"a": [1, 2, 3]}
    assert parsed_cache.parsed("t", parse, "p") == {"a": [1, 2, 3]}
    assert len(calls) == 2 and [p.name for p in folder.iterdir()] == [path.name]


def test_what_marshal_cannot_hold_and_errors_are_not_kept(folder):
    dated = {"day": datetime.date(2026, 11, 30)}
    assert parsed_cache.parsed("d", lambda text: dated, "p") is dated
    assert not folder.exists() or list(folder.iterdir()) == []

    def refuse(text):
        raise InputError("model: not valid YAML")

    with pytest.raises(InputError, match="not valid YAML"):
        parsed_cache.parsed("bad", refuse, "p")
    assert not folder.exists() or list(folder.iterdir()) == []


@pytest.mark.parametrize("kind", ["models", "systems", "frameworks"])
def test_every_catalog_entry_reads_back_as_parsed(folder, kind):
    for name in catalog_names(kind):
        text = (catalog_folder(kind) / f"{name}.yaml").read_text(encoding="utf-8")

        def parse(text, name=name):
            return parse_document(text, repr(f"{kind}/{name}.yaml"), kind, as_json=False)

        first = parsed_cache.parsed(text, parse, "strict")
        kept = parsed_cache.parsed(text, lambda text: pytest.fail("parsed again"), "strict")
        assert _typed(kept) == _typed(first) == _typed(parse(text))


def test_every_packaged_file_reads_back_as_parsed(folder):
    # the exporters' kept argument lists and start-up checks, the importers' names, the GEMM benchmarks and
    # the expert loads: packaged_yaml's data, kept, equals PyYAML's safe loader's
    import yaml

    package = Path(parsed_cache.__file__).parents[1]
    files = sorted(
        [*package.glob("export/*/*.yaml"), *package.glob("importers/*.yaml")]
        + [package / "catalog" / "benchmarks" / "gemm.yaml"]
        + [package / "catalog" / "routing" / "expert_loads.yaml"]
    )
    assert len(files) >= 13
    for path in files:
        text = path.read_text()
        first = parsed_cache.packaged_yaml(text)
        assert (folder / (parsed_cache.entry_key(text, "packaged") + ".marshal")).is_file()
        kept = parsed_cache.packaged_yaml(text)
        assert _typed(kept) == _typed(first) == _typed(yaml.load(text, Loader=yaml.CSafeLoader))


def test_a_second_process_reads_the_catalog_without_a_yaml_parser(folder):
    code = (
        "import sys\nfrom paraplan.catalog import load_model, load_system\n"
        "load_model('gpt3-175b'); load_system('dgx-a100-80gb')\nprint('yaml' in sys.modules)"
    )
    env = {**os.environ, "PARAPLAN_CACHE_DIR": str(folder.parent)}

    def run():
        return subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        ).stdout.split()

    assert run() == ["True"] and run() == ["False"]


def test_no_home_directory_means_nothing_is_kept(monkeypatch):
    """No PARAPLAN_CACHE_DIR, a relative XDG_CACHE_HOME (ignored, as the XDG spec says) and no home directory
    to be found: the entry is parsed each time and nothing is kept (no traceback from pathlib)."""
    monkeypatch.delenv("PARAPLAN_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    monkeypatch.delenv("HOME", raising=False)

    def no_home(self):
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "expanduser", no_home)
    assert parsed_cache.cache_folder() is None
    parse, calls = _counting({"a": 1})
    assert parsed_cache.parsed("a: 1\n", parse, "strict") == {"a": 1}
    assert parsed_cache.parsed("a: 1\n", parse, "strict") == {"a": 1}
    assert len(calls) == 2


def test_a_relative_xdg_cache_home_is_ignored(tmp_path, monkeypatch):
    monkeypatch.delenv("PARAPLAN_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert parsed_cache.cache_folder() == tmp_path / ".cache" / "paraplan" / "catalog"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert parsed_cache.cache_folder() == tmp_path / "xdg" / "paraplan" / "catalog"
