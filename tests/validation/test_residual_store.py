"""The shipped validation residuals (paraplan.validate.residuals): current, and never read when stale."""

from __future__ import annotations

import json
import shutil

import pytest

from paraplan.validate import residuals as store
from paraplan.validate.band import error_band

REGENERATE = "stale: run `python -m paraplan.validate.residuals` after changing the package"


def test_the_shipped_residuals_are_this_packages():
    document = json.loads(store.STORE.read_text(encoding="utf-8"))
    assert document["fingerprint"] == store.package_fingerprint(), REGENERATE
    computed = store.compute_validation_residuals()
    assert store.stored_residuals() == computed, REGENERATE
    assert store.validation_residuals() == computed
    assert any(key.startswith("architecture:") for key in computed) and len(computed) > 20


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


def test_a_stale_store_falls_back_to_the_cases(tmp_path, monkeypatch):
    path = tmp_path / "residuals.json"
    monkeypatch.setattr(store, "STORE", path)
    fake = {"fingerprint": store.package_fingerprint(), "residuals": {"dtype:bf16": [99.0]}}
    path.write_text(json.dumps(fake))
    assert store.stored_residuals() == {
        "dtype:bf16": (99.0,)
    }  # current fingerprint: read as stored
    fake["fingerprint"] = "f" * 64
    path.write_text(json.dumps(fake))
    store.validation_residuals.cache_clear()
    try:
        assert store.validation_residuals() == store.compute_validation_residuals()
    finally:
        store.validation_residuals.cache_clear()


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


def test_the_band_is_the_same_from_the_store_and_from_the_cases():
    from paraplan.catalog import load_model, load_system
    from paraplan.specs.plan import PlanSpec

    model, system = load_model("llama3-70b"), load_system("dgx-h100-80gb")
    plan = PlanSpec(gpus=64, tp=8, pp=2, global_batch=128, seq_length=8192, dtype="bf16")
    stored = error_band(model, system, plan, 1.0)
    assert stored == error_band(
        model, system, plan, 1.0, residuals=store.compute_validation_residuals()
    )
    assert stored.low_s <= 1.0 <= stored.high_s
