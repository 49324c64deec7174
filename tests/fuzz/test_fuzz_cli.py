"""Hypothesis over the CLI in this process (derandomized): options drawn from valid and hostile
values; every run exits 0, 1 or 2, an exit 2 prints one stderr line, nothing prints a traceback or
an internal error, and each run finishes within the suite's bound (conftest.SECONDS)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

INTS = [
    "0",
    "-1",
    "1",
    "2",
    "8",
    "16",
    "3",
    "1024",
    "99999999999999999999999",
    "1e23",
    "abc",
    "",
    "1.5",
    "nan",
]
FLOATS = ["0", "-1", "inf", "nan", "1e308", "1e-300", "2.5", "x"]
OPTIONS = {
    "--gpus": INTS,
    "--global-batch": INTS,
    "--seq-length": INTS + ["16777217", "1048576"],
    "--tp": INTS,
    "--pp": INTS,
    "--cp": INTS,
    "--micro-batch": INTS,
    "--zero": INTS + ["7"],
    "--dtype": ["bf16", "fp8", "fp4"],
    "--recompute": ["none", "full", "partial"],
    "--tokens": ["1T", "inf", "nan", "-5", "15e12", "1e400"],
    "--price": FLOATS,
    "--model": ["gpt3-125m", "llama3-8b", "h100", "-", "/dev/zero", "/nonexistent.yaml"],
    "--system": ["dgx-a100-80gb", "dgx-h100-80gb", "a100", "/dev/zero"],
}
SEARCH_ONLY = {"--top": INTS + ["1000000"], "--max-global-batch": INTS}


@st.composite
def argv(draw):
    command = draw(st.sampled_from(["estimate", "search"]))
    names = sorted(OPTIONS) + (sorted(SEARCH_ONLY) if command == "search" else [])
    pool = {**OPTIONS, **SEARCH_ONLY}
    chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=7, unique=True))
    args = [command, "--model", "gpt3-125m", "--system", "dgx-a100-80gb"]
    for name in chosen:
        value = draw(st.sampled_from(pool[name]))
        if name in ("--model", "--system"):
            args[args.index(name) + 1] = value
        else:
            args += [name, value]
    if "--gpus" not in chosen:
        args += ["--gpus", "8"]
    if command == "search":  # keep the space small: the bound is on the inputs, not a big search
        args += ["--no-offload", "--default-overlap", "--default-placement"]
        if "--tp" not in chosen:
            args += ["--tp", "1,2"]
        if "--pp" not in chosen:
            args += ["--pp", "1,2"]
        if "--global-batch" not in chosen and "--max-global-batch" not in chosen:
            args += ["--global-batch", "16"]
    return args


@FUZZ
@given(args=argv())
def test_cli_never_crashes(cli, args):
    cli(*args)
