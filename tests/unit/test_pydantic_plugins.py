"""io.pydantic_plugins: pydantic's plugin lookup without importlib.metadata while every plugin is off (issue 31);
otherwise pydantic's own loader, as if no stand-in were there. Each case in a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_SETUP = """
import sys
from paraplan.io.pydantic_plugins import LOADER, skip_plugin_scan
skip_plugin_scan()
from pydantic import BaseModel
class M(BaseModel):
    x: int
assert M(x=1).x == 1
real = sys.modules[LOADER].get_plugins.__module__ == LOADER
"""


def _run(code: str, disabled: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    if disabled is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = disabled
    proc = subprocess.run(
        [sys.executable, "-c", _SETUP + code], env=env, capture_output=True, text=True, check=True
    )
    return proc.stdout.split()


@pytest.mark.parametrize("disabled", ["__all__", "1", "true"])
def test_every_plugin_off_loads_no_importlib_metadata(disabled):
    out = _run(
        "print('importlib.metadata' in sys.modules, real, tuple(sys.modules[LOADER].get_plugins()))",
        disabled,
    )
    assert out == ["False", "False", "()"]


@pytest.mark.parametrize("disabled", [None, "some-plugin", "false"])
def test_otherwise_pydantic_loads_its_plugins_itself(disabled):
    # the first validator asked the stand-in, which handed over: pydantic's loader is in its place and scanned
    out = _run(
        "print('importlib.metadata' in sys.modules, real, type(sys.modules[LOADER]._plugins).__name__)",
        disabled,
    )
    assert out == ["True", "True", "dict"]


def test_other_names_and_a_loaded_loader():
    # a name the stand-in lacks comes from pydantic's loader; a loader loaded already is left as it is
    out = _run(
        "import pydantic.plugin._loader as loader\n"
        "print(hasattr(loader, '__path__'), 'importlib.metadata' in sys.modules)\n"
        "print(loader.PYDANTIC_ENTRY_POINT_GROUP, 'importlib.metadata' in sys.modules)\n"
        "real = sys.modules[LOADER]; skip_plugin_scan(); print(sys.modules[LOADER] is real)\n"
        "print(real.get_plugins.__module__ == LOADER, tuple(real.get_plugins()))",
        "__all__",
    )
    assert out == ["False", "False", "pydantic", "True", "True", "True", "()"]
