"""Helpers of the fuzz suite: run the CLI in this process and check the failure contract."""

from __future__ import annotations

import time

import pytest

from paraplan.cli import main

SECONDS = 5.0  # every case must finish within this (issue 13: bounded time)


@pytest.fixture
def cli(capsys, monkeypatch):
    """``cli(*argv) -> (code, stdout, stderr)``; asserts the failure contract of every run: exit 0, 1
    or 2; on exit 2 exactly one stderr line ``error: ...``; never a traceback or an internal error;
    done within SECONDS."""
    monkeypatch.setenv("COLUMNS", "200")

    def run(*argv: str, codes: tuple[int, ...] = (0, 1, 2)) -> tuple[int, str, str]:
        start = time.perf_counter()
        with pytest.raises(SystemExit) as info:
            main([str(a) for a in argv])
        seconds = time.perf_counter() - start
        out, err = capsys.readouterr()
        code = info.value.code or 0
        assert code in codes, (argv, code, err)
        assert "Traceback" not in err and "internal error" not in err, (argv, err)
        if code == 2:
            assert err.startswith("error: ") and err.count("\n") == 1, (argv, err)
        assert seconds < SECONDS, (argv, seconds)
        return code, out, err

    return run
