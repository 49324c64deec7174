"""The shipped validation residuals (paraplan.validate.residuals): current, and never read when stale."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import replace

import pytest

from paraplan.validate import residuals as store
from paraplan.validate.band import error_band

REGENERATE = "stale: run `python -m paraplan.validate.residuals` after changing the package"


def test_the_shipped_residuals_are_this_packages():
    """The store was written by this package's code and data (the fingerprint), and its cases,
    band keys, features and in-sample errors are what one validation run of this code gives (its
    cross-validated errors come from ``write_store``'s leave-one-group-out run, about a minute,
    which tests/validation's CV tests exercise; not repeated here to keep the suite short)."""
    document = json.loads(store.STORE.read_text(encoding="utf-8"))
    assert document["fingerprint"] == store.package_fingerprint(), REGENERATE
    stored = store.stored_residuals()
    assert stored is not None, REGENERATE
    rederived = store.rederived_residuals(stored)
    assert [replace(r, error_pct=0.0) for r in rederived] == [
        replace(r, error_pct=0.0) for r in stored
    ], REGENERATE
    assert [r.error_pct for r in rederived] == pytest.approx([r.error_pct for r in stored])
    assert store.validation_residuals() == stored
    assert len(stored) > 40 and {r.role for r in stored} == {"calibration", "held_out"}
    assert any(r.error_pct != r.in_sample_error_pct for r in stored)  # cross-validated


@pytest.mark.parametrize(
    "text",
    [
        None,  # no store
        "{not json",
        json.dumps(
            {"fingerprint": "0" * 64, "residuals": {"dtype:bf16": [99.0]}}
        ),  # another package's
        json.dumps(["a list"]),
    ],
)
def test_a_missing_broken_or_foreign_store_is_not_read(tmp_path, monkeypatch, text):
    path = tmp_path / "residuals.json"
    if text is not None:
        path.write_text(text)
    monkeypatch.setattr(store, "STORE", path)
    assert store.stored_residuals() is None


def _made_up_records():
    """Records of the bundled cases with a made-up cross-validation shift of +i % for the i-th case."""
    cases, entries = store._bundled_runs()
    records = store.residual_records(cases, entries, {})
    return tuple(replace(r, error_pct=r.in_sample_error_pct + i) for i, r in enumerate(records))


def test_a_stale_store_is_rederived_from_its_refit_shifts(tmp_path, monkeypatch):
    path = tmp_path / "residuals.json"
    monkeypatch.setattr(store, "STORE", path)
    records = _made_up_records()
    document = {
        "fingerprint": store.package_fingerprint(),
        "residuals": [r.to_dict() for r in records],
    }
    path.write_text(json.dumps(document))
    assert store.stored_residuals() == records  # current fingerprint: read as stored
    # nothing changed since: the in-sample errors now plus the stored shifts give the records back
    assert store.rederived_residuals(records) == records
    document["fingerprint"] = "f" * 64
    document["residuals"][0]["in_sample_error_pct"] -= 5.0  # the model moved this case by 5 points
    path.write_text(json.dumps(document))
    assert store.stored_residuals() is None
    store.validation_residuals.cache_clear()
    try:
        rederived = store.validation_residuals()
    finally:
        store.validation_residuals.cache_clear()
    assert rederived[0].error_pct == pytest.approx(records[0].error_pct + 5.0)
    assert rederived[1:] == records[1:]
    # no store at all: every case takes its in-sample error
    assert all(r.error_pct == r.in_sample_error_pct for r in store.rederived_residuals(()))


def test_the_fingerprint_reads_every_code_and_data_file(tmp_path, monkeypatch):
    tree = tmp_path / "paraplan"
    shutil.copytree(store.PACKAGE_ROOT, tree, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(store, "PACKAGE_ROOT", tree)
    monkeypatch.setattr(store, "STORE", tree / "validate" / "residuals.json")
    before = store.package_fingerprint()
    assert before == store.package_fingerprint()
    (tree / "validate" / "residuals.json").write_text("{}")  # the store itself is left out
    assert store.package_fingerprint() == before
    for changed in (
        "cost/compute.py",
        "catalog/systems/dgx-h100-80gb.yaml",
        "validate/cases/narayanan2021.json",
    ):
        path = tree / changed
        original = path.read_bytes()
        path.write_bytes(original + b"\n")
        assert store.package_fingerprint() != before, changed
        path.write_bytes(original)
    assert store.package_fingerprint() == before


def _rglob_fingerprint(root, store_path) -> str:
    """The fingerprint as pathlib states it: every file of the suffixes under ``root`` by ``rglob``, sorted as
    paths, but the store and ``__pycache__``, its relative path and bytes hashed."""
    digest = hashlib.sha256()
    files = sorted(
        p
        for p in root.rglob("*")
        if p.suffix in store.FINGERPRINTED_SUFFIXES
        and p.is_file()
        and p != store_path
        and "__pycache__" not in p.parts
    )
    for path in files:
        for chunk in (path.relative_to(root).as_posix().encode(), path.read_bytes()):
            digest.update(chunk)
            digest.update(b"\0")
    return digest.hexdigest()


def test_the_fingerprint_walk_is_rglobs(tmp_path, monkeypatch):
    """package_fingerprint walks the tree with os.scandir (issue 31: ~2x faster than rglob): the same files in
    the same order as Path.rglob and sorted paths, on a tree with names that sort differently as strings and as
    parts ("a/b.py" before "a-c.py"), hidden files, a folder with a suffix, links and a __pycache__."""
    tree = tmp_path / "paraplan"
    shutil.copytree(store.PACKAGE_ROOT / "validate", tree / "validate")
    (tree / "a").mkdir()
    (tree / "a" / "b.py").write_text("b")
    (tree / "a-c.py").write_text("c")
    (tree / "a.py").write_text("a")
    (tree / "..py").write_text("d")  # pathlib's suffix ".py"; os.path.splitext sees none
    (tree / ".hidden.yaml").write_text("h")
    (tree / ".json").write_text("j")
    (tree / "folder.py").mkdir()
    (tree / "folder.py" / "in.json").write_text("{}")
    (tree / "validate" / "__pycache__").mkdir(exist_ok=True)
    (tree / "validate" / "__pycache__" / "q.py").write_text("q")
    (tree / "linked").symlink_to(tree / "a")
    (tree / "link.py").symlink_to(tree / "a-c.py")
    monkeypatch.setattr(store, "PACKAGE_ROOT", tree)
    monkeypatch.setattr(store, "STORE", tree / "validate" / "residuals.json")
    assert store.package_fingerprint() == _rglob_fingerprint(tree, store.STORE)


def test_the_band_reads_the_package_residuals_by_default():
    from paraplan.catalog import load_model, load_system
    from paraplan.specs.plan import PlanSpec

    model, system = load_model("llama3-70b"), load_system("dgx-h100-80gb")
    plan = PlanSpec(gpus=64, tp=8, pp=2, global_batch=128, seq_length=8192, dtype="bf16")
    band = error_band(model, system, plan, 1.0)
    assert band == error_band(model, system, plan, 1.0, residuals=store.validation_residuals())
    assert band.low_s <= 1.0 <= band.high_s and band.pool_cases > 0
