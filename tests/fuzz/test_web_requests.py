"""Issue 37: the web explorer's requests as a hostile user sends them. Seeded mutations of the
search, estimate, export and sweep bodies (wrong types, out-of-range and non-finite numbers, unknown
names, control characters, paths, oversized values, missing fields) through Starlette's TestClient:
every answer is a JSON 200 or a one-line 4xx error, never a 500 or a traceback; no number in an
answer is NaN, infinite, negative where a time or size, or an MFU above 1; no file appears outside
the test's own folder."""

from __future__ import annotations

import json
import math
import random

import pytest

pytest.importorskip(
    "starlette", reason="the web extra is not installed: pip install 'paraplan[web]'"
)

from starlette.testclient import TestClient  # noqa: E402

from paraplan.web.app import create_app  # noqa: E402

BASE = {
    "model": "gpt3-1.3b",
    "system": "dgx-a100-80gb",
    "gpus": "8",
    "global-batch": "64",
    "seq-length": "2048",
    "tp": "1,2",
    "pp": "1,2",
    "top": "3",
}
PLAN = {"gpus": 8, "tp": 2, "pp": 1, "dp": 4, "micro_batch": 2, "global_batch": 64}
HOSTILE = [
    "",
    "-1",
    "0",
    "1e400",
    "nan",
    "inf",
    "3.5",
    "x" * 5000,
    "../../etc/passwd",
    "/dev/zero",
    "\x1b[31mred\x1b[0m",
    "a\nb",
    "1,,2",
    "99999999999999999999",
    "gpt3-175b; rm -rf /",
    "$(touch pwned)",
]
SEED = 37
CASES = 60


def _mutate(rng: random.Random, body: dict) -> dict:
    """One to three fields replaced by a hostile value, a wrong type, or removed."""
    out = dict(body)
    for _ in range(rng.randint(1, 3)):
        key = rng.choice(sorted(out) + ["unknown-option"])
        roll = rng.random()
        if roll < 0.15:
            out.pop(key, None)
        elif roll < 0.3:
            out[key] = rng.choice([None, [], {}, 12, -3.5, True])
        else:
            out[key] = rng.choice(HOSTILE)
    return out


def _finite_and_possible(value, key: str = "") -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _finite_and_possible(v, k)
    elif isinstance(value, list):
        for v in value:
            _finite_and_possible(v, key)
    elif isinstance(value, float):
        assert math.isfinite(value), key
        if key.endswith(("_s", "_bytes", "_gib")):
            assert value >= 0, (key, value)
        if key in ("mfu", "hfu"):
            assert value <= 1.0, (key, value)


def _check(response) -> None:
    assert response.status_code < 500, response.text[:300]
    body = response.json()
    if response.status_code >= 400:
        message = body["error"]["message"]
        assert "\n" not in message and "Traceback" not in message, message
        return
    _finite_and_possible(body)


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    folder = tmp_path_factory.mktemp("web-fuzz")
    with TestClient(create_app(time_limit_s=20.0)) as c:
        yield c, folder


def _wait(c, job_id: str) -> dict:
    import time

    end = time.monotonic() + 60
    while time.monotonic() < end:
        state = c.get(f"/api/jobs/{job_id}").json()
        if state["state"] != "running":
            return state
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} ran past 60 s")


def test_hostile_requests_get_an_answer_or_a_one_line_error(client, monkeypatch):
    c, folder = client
    monkeypatch.chdir(folder)
    rng = random.Random(SEED)
    for _ in range(CASES):
        kind = rng.choice(["search", "estimate", "export", "sweep"])
        params = _mutate(rng, BASE)
        if kind == "search":
            response = c.post("/api/search", json={"params": params})
            _check(response)
            if response.status_code == 200:
                state = _wait(c, response.json()["id"])
                assert state["state"] in ("done", "error"), state["state"]
                if state["state"] == "error":
                    assert "\n" not in state["error"]["message"]
                else:
                    _finite_and_possible(state["result"])
        elif kind == "sweep":
            body = {"params": params, "gpus-list": rng.choice(["8,16", "-1", "x", "8" * 50])}
            response = c.post("/api/sweep", json=body)
            _check(response)
            if response.status_code == 200:
                c.delete(f"/api/jobs/{response.json()['id']}")
        else:
            plan = _mutate(rng, PLAN) if rng.random() < 0.7 else PLAN
            body = {"params": params, "plan": plan}
            if kind == "export":
                body["to"] = rng.choice(["megatron", "nemo", "torchtitan", "deepspeed", "jax", ""])
            _check(c.post(f"/api/{kind}", json=body))
    assert list(folder.iterdir()) == [], "a request wrote a file"


def test_malformed_bodies_are_refused_in_one_line(client):
    c, _ = client
    for raw in (b"", b"{", b"[]", b"null", b'{"params": 5}', b'{"params": {"gpus": {}}}'):
        for path in ("/api/search", "/api/estimate", "/api/export", "/api/sweep"):
            response = c.post(path, content=raw, headers={"content-type": "application/json"})
            _check(response)
            assert response.status_code == 400, (path, raw, response.status_code)
    deep: list = [1]
    for _ in range(40):
        deep = [deep]
    nested = json.dumps({"params": BASE, "plan": deep})
    _check(c.post("/api/estimate", content=nested, headers={"content-type": "application/json"}))
