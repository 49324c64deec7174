"""The web explorer end to end in headless Chromium (Debian's ``chromium``, driven by Playwright for
Python through ``executable_path``; no browser build is downloaded): fill the form, run a search,
read the ranked table, click a scatter point, open a plan, follow the shared link in a fresh page,
export a plan, see a bad input's error. Screenshots of each view go to $PARAPLAN_WEB_ARTIFACTS
(default: a temporary folder, printed). Without a browser the tests skip with the reason.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip(
    "starlette", reason="the web extra is not installed: pip install 'paraplan[web]'"
)
playwright_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed: pip install 'paraplan[test]'"
)

from web_helpers import CLUSTER, MOE_CLUSTER, SMALL, SWEEP, cluster_search, moe_cluster_search

CHROMIUM = os.environ.get("PARAPLAN_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
pytestmark = [
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(),
        reason=f"no Chromium at {CHROMIUM} (apt-get install -y chromium, or set PARAPLAN_CHROMIUM)",
    ),
    pytest.mark.slow,  # ~20 s with the browser's start: CI runs them, -m "not slow" leaves them out
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    import uvicorn

    from paraplan.web.app import create_app

    port = _free_port()
    config = uvicorn.Config(create_app(120), host="127.0.0.1", port=port, log_level="warning")
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    end = time.monotonic() + 30
    while not running.started and time.monotonic() < end:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    running.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        try:
            chromium = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        except Exception as exc:  # noqa: BLE001 - a browser that does not start is a skip
            pytest.skip(f"Chromium at {CHROMIUM} does not start: {str(exc).splitlines()[0]}")
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def shots() -> Path:
    folder = Path(
        os.environ.get("PARAPLAN_WEB_ARTIFACTS") or tempfile.mkdtemp(prefix="paraplan-web-")
    )
    folder.mkdir(parents=True, exist_ok=True)
    print(f"screenshots: {folder}")
    return folder


def _page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    return context.new_page()


def _searched(page, limit_ms=60_000):
    page.wait_for_selector("body[data-state]", timeout=limit_ms)
    page.wait_for_function("document.body.dataset.state !== 'searching'", timeout=limit_ms)
    assert page.evaluate("document.body.dataset.state") == "done"
    page.wait_for_selector("body[data-detail]", timeout=limit_ms)


def _rows(page) -> list[list[str]]:
    return page.eval_on_selector_all(
        "#ranked tbody tr", "rows => rows.map(r => Array.from(r.cells).map(c => c.innerText))"
    )


@pytest.fixture(scope="module")
def searched(browser, server, shots):
    """The form filled by hand and the search run: (page, ranked rows)."""
    page = _page(browser)
    page.goto(server)
    page.wait_for_selector("body[data-ready]")
    page.select_option("#f-model", "gpt3-13b")
    page.select_option("#f-system", "dgx-a100-80gb")
    for name in ("gpus", "max-global-batch", "seq-length", "tp", "pp", "top"):
        page.fill(f"[name={name}]", SMALL[name])
    page.click("#search")
    _searched(page)
    page.screenshot(path=str(shots / "search.png"), full_page=True)
    return page, _rows(page)


def test_the_search_fills_the_ranked_table(searched):
    from paraplan import api

    page, rows = searched
    found = api.search(
        "gpt3-13b", "dgx-a100-80gb", 64, max_global_batch=512, tp=(1, 2, 4), pp=(1, 2, 4), top=5
    ).to_dict()
    assert [r[1] for r in rows] == [p["plan_label"] for p in found["plans"]]
    assert [float(r[2]) for r in rows] == [float(f"{p['step_time_s']:.4g}") for p in found["plans"]]
    assert page.inner_text("#explain tbody")  # why the best plan wins
    assert "band:" in page.inner_text("#band-note")


def test_a_scatter_point_opens_its_plan(searched, shots):
    """Every point of the search's scatter is drawn, as SVG points up to the page's WebGL threshold
    and as WebGL traces above it (the rule, whatever the count); clicking one opens its plan."""
    page, rows = searched
    page.wait_for_function("document.getElementById('pareto').data !== undefined")
    count = page.evaluate("state.doc.scatter.length")
    # the feasible plans the search evaluated (one point per cell): more than the ranked ones
    assert count > len(rows)
    assert "the exact search evaluated" in page.inner_text("#scatter-rule")
    pareto = "document.getElementById('pareto')"
    webgl = count > page.evaluate("WEBGL_ABOVE")
    types = set(page.evaluate(f"{pareto}.data.map(t => t.type)"))
    assert types == {"scattergl" if webgl else "scatter"}
    assert page.evaluate(f"{pareto}.data.reduce((n, t) => n + t.x.length, 0)") == count
    before = page.evaluate("document.body.dataset.detail")
    if webgl:  # a WebGL point is no DOM element: Plotly's click event, as a click on it sends
        target = page.evaluate(f"{pareto}.data[{pareto}.data.length - 1].customdata.at(-1)")
        page.evaluate(f"{pareto}.emit('plotly_click', {{points: [{{customdata: {target}}}]}})")
    else:
        page.query_selector_all("#pareto .scatterlayer .point")[-1].click(force=True)
    page.wait_for_function(f"document.body.dataset.detail !== {before!r}", timeout=30_000)
    opened = page.evaluate("document.body.dataset.detail")
    assert opened and opened != before
    page.wait_for_selector("#timeline .bars, #timeline .trace")
    timeline = page.evaluate("state.detail.timeline")
    # the drawn schedule ends at the estimator's pipeline time (web.timeline's stated cases)
    if timeline["makespan_s"] is not None and timeline["schedule"] in ("1f1b", "gpipe"):
        assert timeline["makespan_s"] <= timeline["pipeline_s"] * (1 + 1e-9)
    assert "estimator's pipeline time" in page.inner_text("#timeline-note")
    page.screenshot(path=str(shots / "plan.png"), full_page=True)


def test_a_shared_link_reproduces_the_page(searched, browser, shots):
    page, rows = searched
    page.click("#ranked tbody tr:nth-child(2) .open")
    page.wait_for_function("location.search.includes('plan=2')")
    link = page.url
    assert "model=gpt3-13b" in link and "max-global-batch=512" in link and "tp=1%2C2%2C4" in link
    fresh = _page(browser)
    fresh.goto(link)
    _searched(fresh)
    assert _rows(fresh) == rows
    fresh.wait_for_function("document.body.dataset.detail.length > 0")
    assert fresh.inner_text("#detail-title") == page.inner_text("#detail-title")
    fresh.screenshot(path=str(shots / "shared-link.png"), full_page=True)
    fresh.context.close()


def test_a_plan_is_exported(searched):
    page, rows = searched
    page.click("#ranked tbody tr:nth-child(1) .open")
    page.wait_for_function(f"document.body.dataset.detail === {rows[0][1]!r}")
    with page.expect_download(timeout=15_000) as download:
        page.click("[data-export=megatron]")
        page.wait_for_function(
            "document.querySelector('#export-text').innerText.length > 0"
            " || document.querySelector('.err[data-for=export]').innerText.length > 0"
        )
        assert page.inner_text(".err[data-for=export]") == ""
    path = download.value.path()
    assert download.value.suggested_filename == "plan-megatron.sh"
    text = Path(path).read_text()
    assert "pretrain_gpt.py" in text and "--tensor-model-parallel-size" in text
    assert page.inner_text("#export-text") == text


def test_a_plan_is_exported_to_megatron_bridge(searched):
    """The Megatron-Bridge button beside the other exports downloads the ConfigContainer overrides the
    CLI writes (paraplan export --to megatron-bridge)."""
    page, rows = searched
    page.click("#ranked tbody tr:nth-child(1) .open")
    page.wait_for_function(f"document.body.dataset.detail === {rows[0][1]!r}")
    assert page.is_visible("[data-export=megatron-bridge]")
    with page.expect_download(timeout=15_000) as download:
        page.click("[data-export=megatron-bridge]")
        page.wait_for_function(
            "document.querySelector('#export-text').innerText.includes('Megatron-Bridge')"
            " || document.querySelector('.err[data-for=export]').innerText.length > 0"
        )
        assert page.inner_text(".err[data-for=export]") == ""
    assert download.value.suggested_filename == "plan-megatron-bridge.py"
    text = Path(download.value.path()).read_text()
    assert (
        "cfg.model.tensor_model_parallel_size = " in text and "get_mixed_precision_config" in text
    )
    assert page.inner_text("#export-text") == text


def test_a_bad_input_shows_the_clis_error_next_to_the_field(browser, server, shots):
    page = _page(browser)
    page.goto(server)
    page.wait_for_selector("body[data-ready]")
    page.fill("[name=gpus]", "lots")
    page.click("#search")
    page.wait_for_selector(".err[data-for=gpus]:not(:empty)")
    assert page.inner_text(".err[data-for=gpus]") == "--gpus: 'lots' is not an integer"
    assert page.evaluate("document.querySelector('[name=gpus]').classList.contains('bad')")
    page.screenshot(path=str(shots / "bad-input.png"))
    page.context.close()


def test_two_tabs_searching_at_once_both_finish(browser, server):
    context = browser.new_context()
    first, second = context.new_page(), context.new_page()
    query = "&".join(f"{k}={v}" for k, v in SMALL.items() if k != "top")
    first.goto(f"{server}/?{query}&top=3")
    second.goto(f"{server}/?{query}&top=4")
    _searched(first)
    _searched(second)
    assert len(_rows(first)) == 3 and len(_rows(second)) == 4
    assert _rows(first) == _rows(second)[:3]
    context.close()


def test_a_cluster_of_pools_is_searched(browser, server, shots):
    page = _page(browser)
    page.goto(server)
    page.wait_for_selector("body[data-ready]")
    page.select_option("#f-model", "gpt3-1.3b")
    page.click("#cluster-box summary")
    page.fill("[name=cluster-text]", CLUSTER)
    page.fill("[name=max-global-batch]", "")
    for name, value in (("global-batch", "32"), ("tp", "1,2"), ("pp", "1,2"), ("top", "3")):
        page.fill(f"[name={name}]", value)
    page.click("#search")
    _searched(page)
    labels = page.eval_on_selector_all(
        "#cluster-plans tbody tr td.plan", "cells => cells.map(c => c.innerText)"
    )
    found = cluster_search()
    assert labels == [p["label"] for p in found["plans"]] and labels
    assert page.is_hidden("#ranked")
    page.screenshot(path=str(shots / "cluster.png"), full_page=True)
    page.context.close()


def test_a_moe_cluster_takes_the_expert_options(browser, server, shots):
    """The form's cluster search of an MoE model with its controls for ep, etp, dispatcher,
    expert-load-cv, cp, schedule and time-budget filled: the plans of api.search_cluster given them."""
    page = _page(browser)
    page.goto(server)
    page.wait_for_selector("body[data-ready]")
    page.select_option("#f-model", MOE_CLUSTER["model"])
    page.click("#cluster-box summary")
    page.fill("[name=cluster-text]", CLUSTER)
    page.fill("[name=max-global-batch]", "")
    for name, value in MOE_CLUSTER.items():
        if name not in ("model", "cluster-text"):
            page.fill(f"[name={name}]", value)
    page.click("#search")
    _searched(page)
    labels = page.eval_on_selector_all(
        "#cluster-plans tbody tr td.plan", "cells => cells.map(c => c.innerText)"
    )
    assert labels == [p["label"] for p in moe_cluster_search()["plans"]] and labels
    page.screenshot(path=str(shots / "cluster-moe.png"), full_page=True)
    page.context.close()


def test_a_time_to_train_objective_shows_each_plans_days(browser, server, shots):
    page = _page(browser)
    query = "&".join(f"{k}={v}" for k, v in SMALL.items())
    page.goto(f"{server}/?{query}&objective=time-to-train&tokens=300B")
    _searched(page)
    assert page.input_value("#f-objective") == "time-to-train"
    days = page.eval_on_selector_all("#ttt tbody tr", "rows => rows.length")
    assert days == len(_rows(page)) > 0
    assert "expected wall-clock seconds per token" in page.inner_text("#ttt-title")
    page.screenshot(path=str(shots / "time-to-train.png"), full_page=True)
    page.context.close()


def test_a_sweep_file_is_run_and_drawn_as_a_heatmap(browser, server, shots):
    """A pasted sweep file (paraplan sweep's schema): progress, then the heatmap of its two swept
    axes (GPUs × HBM bandwidth), each cell the best plan's tokens/s of that point."""
    page = _page(browser)
    page.goto(server)
    page.wait_for_selector("body[data-ready]")
    page.click("#sweep-file summary")
    page.fill("#sweep-text", SWEEP)
    page.click("#sweep-file-go")
    page.wait_for_selector("body[data-sweep-drawn]", timeout=180_000)
    chart = page.evaluate("document.getElementById('sweep-chart').data[0]")
    points = page.evaluate("state.sweep.points")
    assert chart["type"] == "heatmap"
    assert chart["x"] == ["32", "64"] and chart["y"] == ["2TB/s", "3TB/s"]
    expected = [
        [p["tokens_per_s"] for p in points if p["accelerator.hbm_bandwidth"] == bw]
        for bw in ("2TB/s", "3TB/s")
    ]
    assert chart["z"] == expected
    page.screenshot(path=str(shots / "sweep-heatmap.png"), full_page=True)
    page.fill("#sweep-text", SWEEP.replace("gpus: [32, 64]", "gpus: 64"))
    page.click("#sweep-file-go")
    page.wait_for_selector(".err[data-for=sweep-text]:not(:empty)", timeout=60_000)
    assert page.inner_text(".err[data-for=sweep-text]").startswith("sweep.gpus: 64 is not a list")
    page.context.close()
