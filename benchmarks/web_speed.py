"""Seconds of the web explorer as a user sees them (``paraplan serve``, docs/web.md), in headless
Chromium (Debian's chromium through Playwright, as tests/web/test_web_browser.py):

- page interactive: from navigation to the form filled with the catalog (body[data-ready]);
- README search: GPT-3 175B on 1,024 A100s, max global batch 1,024, seq 2,048, from the click on
  Search to the ranked table shown (body[data-state=done]), and to the best plan's detail
  (body[data-detail]: its estimate with the op tables, the charts);
- the same search's job through the JSON API alone (POST /api/search to the job's result), and the
  search as the API runs it in this process (``paraplan.api.search``), for comparison;
- the scatter's responsiveness with every feasible plan of the README search (``all=1``: the whole
  space evaluated, drawn by web.work.Aggregate's rule): the search's wall time once (minutes), then
  per run the time to redraw the scatter (step time -> cost per step, Plotly.react of every point),
  to zoom (Plotly.relayout to a quarter of each axis) and to hover a point (Plotly.Fx.hover), each
  until Plotly's afterplot / hover event; with the number of points drawn and plans they stand for.

Run: python benchmarks/web_speed.py [--runs N] [--no-scatter]   (median and best of N runs)
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import socket
import statistics
import threading
import time

PROBLEM = {
    "model": "gpt3-175b",
    "system": "dgx-a100-80gb",
    "gpus": "1024",
    "max-global-batch": "1024",
    "seq-length": "2048",
}
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
ARGS += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]


def serve():
    import uvicorn

    from paraplan.web.app import create_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_app(time_limit_s=3600)  # the all=1 scan of the README problem takes minutes
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server, f"http://127.0.0.1:{port}"


def browser_runs(url: str, runs: int) -> dict[str, list[float]]:
    from playwright.sync_api import sync_playwright

    chromium = (
        os.environ.get("PARAPLAN_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    )
    out: dict[str, list[float]] = {"page interactive": [], "README search, click to table": []}
    out["page interactive, browser's clock"] = []
    out["README search, click to plan detail"] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS)
        for _ in range(runs):
            page = browser.new_context().new_page()
            start = time.perf_counter()
            page.goto(url)
            page.wait_for_selector("body[data-ready]")
            out["page interactive"].append(time.perf_counter() - start)
            out["page interactive, browser's clock"].append(
                float(page.get_attribute("body", "data-ready")) / 1000
            )
            page.select_option("#f-model", PROBLEM["model"])
            page.select_option("#f-system", PROBLEM["system"])
            for name in ("gpus", "max-global-batch", "seq-length"):
                page.fill(f"[name={name}]", PROBLEM[name])
            page.wait_for_timeout(1500)  # the spare worker process is up, as for a user who types
            start = time.perf_counter()
            page.click("#search")
            page.wait_for_selector("body[data-state=done]", timeout=120_000)
            out["README search, click to table"].append(time.perf_counter() - start)
            page.wait_for_selector("body[data-detail]", timeout=120_000)
            out["README search, click to plan detail"].append(time.perf_counter() - start)
            page.wait_for_function("state.timing && state.timing.scatter", timeout=120_000)
            for name, value in _where(page.evaluate("state.timing")).items():
                out.setdefault(name, []).append(value)
            page.context.close()
        browser.close()
    return out


def _where(t: dict) -> dict[str, float]:
    """Where the click-to-table time goes, by the page's clock (app.js ``state.timing``): the job
    as the server timed it, the rest until the result's message arrived (job start, the event
    stream's polling, sending the document), parsing it, drawing the table, then the scatter."""
    return {
        "README search, click to table painted (page's clock)": (t["painted"] - t["clicked"])
        / 1000,
        "  of which: server job (search in the worker)": t["server_s"],
        "  of which: job start + result transfer": (t["received"] - t["clicked"]) / 1000
        - t["server_s"],
        "  of which: parse the result (JSON)": (t["parsed"] - t["received"]) / 1000,
        "  of which: draw the table": (t["table"] - t["parsed"]) / 1000,
        "then: scatter drawn, after the table": (t["scatter"] - t["painted"]) / 1000,
        "result document (MB)": t["bytes"] / 1e6,
    }


# each action's time until Plotly has drawn it (afterplot), at most LIMIT_MS (then NaN)
LIMIT_MS = 60_000
SCATTER_ACTIONS = {
    "scatter redraw, every feasible plan": """async () => {
        const el = document.getElementById('pareto'), sel = document.getElementById('scatter-y');
        const done = new Promise((r) => el.once('plotly_afterplot', r));
        const t0 = performance.now();
        sel.value = sel.value === 'cost' ? 'time' : 'cost'; sel.onchange();
        const late = new Promise((r) => setTimeout(() => r(NaN), %d));
        return (await Promise.race([done.then(() => performance.now() - t0), late])); }"""
    % LIMIT_MS,
    "scatter zoom, every feasible plan": """async () => {
        const el = document.getElementById('pareto'), xs = el.layout.xaxis.range, ys = el.layout.yaxis.range;
        const t0 = performance.now();
        await Plotly.relayout(el, {'xaxis.range': [xs[0], xs[0] + (xs[1] - xs[0]) / 4],
                                   'yaxis.range': [ys[0], ys[0] + (ys[1] - ys[0]) / 4]});
        const t = performance.now() - t0; await Plotly.relayout(el, {'xaxis.autorange': true, 'yaxis.autorange': true});
        return t; }""",
}


def scatter_runs(url: str, runs: int) -> tuple[dict[str, list[float]], str]:
    """The README search with every feasible plan (all=1), then SCATTER_ACTIONS ``runs`` times."""
    from playwright.sync_api import sync_playwright

    chromium = (
        os.environ.get("PARAPLAN_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    )
    out: dict[str, list[float]] = {name: [] for name in SCATTER_ACTIONS}
    query = "&".join(f"{k}={v}" for k, v in PROBLEM.items()) + "&all=1"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS)
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        start = time.perf_counter()
        page.goto(f"{url}/?{query}")
        page.wait_for_selector("body[data-state]", timeout=3_600_000)
        page.wait_for_function("document.body.dataset.state !== 'searching'", timeout=3_600_000)
        out["every feasible plan: search, click to scatter"] = [time.perf_counter() - start]
        page.wait_for_function("document.getElementById('pareto').data !== undefined")
        points = page.evaluate("state.doc.scatter.length")
        plans = page.evaluate("state.doc.scatter_plans")
        kind = page.evaluate("document.getElementById('pareto').data[0].type")
        out["scatter hover, every feasible plan"] = []
        for _ in range(runs):
            for name, script in SCATTER_ACTIONS.items():
                out[name].append(page.evaluate(script) / 1000)
            out["scatter hover, every feasible plan"].append(_hover(page))
        browser.close()
    return out, f"scatter: {points:,} points ({kind}) for {plans:,} feasible plans"


def _hover(page) -> float:
    """Seconds from moving the mouse onto the best plan's point to its hover label shown."""
    page.locator("#pareto").scroll_into_view_if_needed()
    page.mouse.move(5, 5)
    page.wait_for_function("!document.querySelector('#pareto .hoverlayer .hovertext')")
    x, y = page.evaluate(
        """() => {
        const el = document.getElementById('pareto'), fl = el._fullLayout, box = el.getBoundingClientRect();
        const t = el.data[0], i = 0;
        return [box.left + fl.xaxis._offset + fl.xaxis.d2p(t.x[i]),
                box.top + fl.yaxis._offset + fl.yaxis.d2p(t.y[i])]; }"""
    )
    start = time.perf_counter()
    page.mouse.move(x, y)
    try:
        page.wait_for_selector("#pareto .hoverlayer .hovertext", timeout=LIMIT_MS)
    except Exception:  # noqa: BLE001 - no label: NaN in the table, the other figures kept
        return math.nan
    return time.perf_counter() - start


def api_runs(url: str, runs: int) -> dict[str, list[float]]:
    import httpx

    from paraplan import api

    out: dict[str, list[float]] = {"README search, API job": [], "README search, in process": []}
    for _ in range(runs):
        time.sleep(1.5)
        start = time.perf_counter()
        job = httpx.post(f"{url}/api/search", json={"params": PROBLEM}).json()
        while httpx.get(f"{url}/api/jobs/{job['id']}").json()["state"] == "running":
            time.sleep(0.02)
        out["README search, API job"].append(time.perf_counter() - start)
        start = time.perf_counter()
        api.search("gpt3-175b", "dgx-a100-80gb", 1024, max_global_batch=1024, seq_length=2048)
        out["README search, in process"].append(time.perf_counter() - start)
    return out


def _table(timings: dict[str, list[float]], runs: int) -> None:
    load = os.getloadavg()[0]
    print(f"{'what':46} {'median s':>9} {'best s':>8}  ({runs} runs, {os.cpu_count()} CPUs)")
    for name, values in timings.items():
        print(f"{name:46} {statistics.median(values):9.3f} {min(values):8.3f}")
    print(f"load average now: {load:.1f} (1 min)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-scatter", action="store_true", help="skip the all=1 scan (minutes)")
    parser.add_argument("--scatter-only", action="store_true", help="only the all=1 scatter")
    args = parser.parse_args()
    runs = args.runs
    server, url = serve()
    time.sleep(5)  # the worker processes start and warm up (docs/web.md), as after `paraplan serve`
    if not args.scatter_only:
        timings = api_runs(url, runs)
        try:
            timings.update(browser_runs(url, runs))
        except Exception as exc:  # noqa: BLE001 - no browser: the API timings alone
            print(f"no browser timings: {str(exc).splitlines()[0]}")
        _table(timings, runs)
    if not args.no_scatter:
        try:
            scatter, note = scatter_runs(url, runs)
            _table(scatter, runs)
            print(note)
        except Exception as exc:  # noqa: BLE001 - no browser: said, not hidden
            print(f"no scatter timings: {str(exc).splitlines()[0]}")
    server.should_exit = True


if __name__ == "__main__":
    main()
