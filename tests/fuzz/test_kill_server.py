"""Kill test of the web server's long searches (issue 37): ``paraplan serve`` is SIGKILLed while a
search job runs in its worker process, at a moment observed through the job's own progress (the
search is past its layer costs and scanning rows), then started again on the same port.

What resuming means for the server (web/jobs.py): jobs are not journaled — a search is
deterministic and the page's URL holds the whole problem — so after a restart the page runs the
search again from its URL. The test checks what that needs: the killed server leaves no worker
process behind; the restarted server refuses the old job id with the one-line error that says to
run the search again (ids carry the server run's token: an old id never names a new server's job);
and the search run again from the same parameters gives a document identical, number for number, to
an uninterrupted run (only its ``timing`` differs)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from test_kill import TIMEOUT_S, kill, live_members

pytest.importorskip("uvicorn")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform != "linux", reason="reads /proc to find the server's workers"),
]

# a search of several seconds: 12,171 layer costs, then ~100k rows, progress all along
PARAMS = {
    "model": "gpt3-175b",
    "system": "dgx-a100-80gb",
    "gpus": "1024",
    "max-global-batch": "1024",
    "seq-length": "2048",
    "top": "5",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(port: int, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=data,
        method=method,
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _serve(port: int) -> subprocess.Popen:
    """A ``paraplan serve`` process in its own process group, once it answers."""
    process = subprocess.Popen(
        [sys.executable, "-m", "paraplan", "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        if process.poll() is not None:
            pytest.fail(f"serve ended: {process.stderr.read().decode()}")
        try:
            if _request(port, "GET", "/api/catalog")[0] == 200:
                return process
        except OSError:
            pass
        assert time.monotonic() < deadline, "serve never answered"
        time.sleep(0.05)


def _job(port: int, job_id: str, until) -> dict:
    deadline = time.monotonic() + 4 * TIMEOUT_S
    while True:
        status, job = _request(port, "GET", f"/api/jobs/{job_id}")
        assert status == 200, job
        if until(job):
            return job
        assert time.monotonic() < deadline, f"job never reached the moment: {job}"
        time.sleep(0.02)


def _numbers(doc: dict) -> dict:
    """The search document without its wall-clock timing."""
    return {k: v for k, v in doc.items() if k != "timing"}


@pytest.fixture(scope="module")
def uninterrupted() -> dict:
    """The document the worker builds for PARAMS, run to the end in this process."""
    from paraplan.web import work
    from paraplan.web.params import parse

    return json.loads(json.dumps(work.run_search(parse(PARAMS), lambda *a: None)))


def test_a_killed_server_leaves_no_worker_and_its_search_runs_again_identically(uninterrupted):
    port = _free_port()
    server = _serve(port)
    try:
        status, job = _request(port, "POST", "/api/search", {"params": PARAMS})
        assert status == 200, job
        old = job["id"]

        def scanning(state: dict) -> bool:  # the kill moment: mid-search, rows being scanned
            assert state["state"] == "running", f"finished before the kill moment: {state}"
            return state["progress"]["phase"] == "rows" and state["progress"]["done"] > 0

        _job(port, old, scanning)
        assert len(live_members(server.pid)) >= 2  # the server and the worker running the search
        kill(server)  # SIGKILL; asserts every process of its group (the workers) ends within 5 s
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)

    server = _serve(port)
    try:
        status, job = _request(port, "POST", "/api/search", {"params": PARAMS})  # the page's re-run
        assert status == 200 and job["id"] != old
        # the old page's event stream reconnects: refused, though the new server has a first job too
        status, refused = _request(port, "GET", f"/api/jobs/{old}")
        assert status == 400
        message = refused["error"]["message"]
        assert "is not a job of this server" in message and "again" in message
        assert "\n" not in message
        done = _job(port, job["id"], lambda state: state["state"] != "running")
        assert done["state"] == "done", done
        assert _numbers(done["result"]) == _numbers(uninterrupted)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=TIMEOUT_S)
        finally:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGKILL)
