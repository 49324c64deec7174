"""``import paraplan`` exposes the API with ``__all__``, loaded lazily (no numpy on import), and unknown names or
keywords get a did-you-mean (issue 34)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import paraplan
from paraplan.specs.errors import InputError


def test_every_name_of_all_resolves():
    for name in paraplan.__all__:
        assert getattr(paraplan, name) is not None, name
    assert {"estimate", "search", "load_model", "load_system", "validate"} <= set(paraplan.__all__)
    assert set(paraplan.__all__) <= set(dir(paraplan))


def test_import_paraplan_loads_no_numpy_and_no_estimator():
    code = (
        "import sys, paraplan; "
        "print(*[m for m in ('numpy', 'pydantic', 'paraplan.step.estimate', 'paraplan.api') "
        "if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_the_lazy_names_are_the_api_functions():
    from paraplan import api, catalog

    assert paraplan.estimate is api.estimate and paraplan.load_model is catalog.load_model
    est = paraplan.estimate("llama3-8b", "dgx-h100-80gb", gpus=8, zero=1)
    assert est.step_time_s == api.estimate("llama3-8b", "dgx-h100-80gb", gpus=8, zero=1).step_time_s


def test_unknown_attribute_names_the_closest():
    with pytest.raises(AttributeError, match="did you mean estimate"):
        paraplan.estimat  # noqa: B018


@pytest.mark.parametrize(
    "call,hint",
    [
        (lambda: paraplan.estimate("llama3-8b", "dgx-h100-80gb", gpu=8), "did you mean gpus"),
        (
            lambda: paraplan.estimate("llama3-8b", "dgx-h100-80gb", gpus=8, with_op=True),
            "did you mean with_ops",
        ),
        (
            lambda: paraplan.search("llama3-8b", "dgx-h100-80gb", 8, global_batch=64, zeros=1),
            "did you mean zero",
        ),
    ],
)
def test_unknown_keywords_get_a_did_you_mean(call, hint):
    with pytest.raises(InputError, match=hint):
        call()


def test_search_and_validate_are_the_subpackages_and_callable():
    """``paraplan.search`` is also a subpackage: it stays the package for imports and calls api.search."""
    import paraplan.search.run  # noqa: F401  (the subpackage, loaded)
    from paraplan.search import space

    assert paraplan.search.space is space and callable(paraplan.search)
    found = paraplan.search("gpt3-125m", "dgx-a100-80gb", 1, global_batch=8, top=1)
    assert found.best.plan.gpus == 1
    assert callable(paraplan.validate) and paraplan.validate.__name__ == "paraplan.validate"


def test_search_is_callable_in_a_fresh_interpreter():
    code = (
        "import paraplan; r = paraplan.search('gpt3-125m', 'dgx-a100-80gb', 1, global_batch=8, top=1); "
        "print(r.best.plan.gpus)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"
