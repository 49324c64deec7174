"""``paraplan serve``: the web plan explorer (paraplan.web, docs/web.md) on a local address."""

from __future__ import annotations

import sys
import threading
import webbrowser

from paraplan.cli.app import app
from paraplan.cli.declare import given, switch
from paraplan.specs.errors import InputError

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


@app.command()
def serve(
    host: given(
        str, "--host", help="address to bind (default: this machine only; 0.0.0.0 opens it to all)"
    ) = "127.0.0.1",
    port: given(int, "--port", help="TCP port", min=1, max=65535) = 8000,
    open_page: switch("--open", help="open the page in the default browser") = False,
    time_limit: given(
        float, "--time-limit", help="seconds a search may run before it is stopped", min=1.0
    ) = 300.0,
) -> None:
    """A local web page over the same API: the problem form, ranked plans with error bands, the
    Pareto scatter, plan detail, diff, what-if, sweeps and exports; links reproduce the page."""
    try:
        import uvicorn

        from paraplan.web.app import create_app
    except ImportError as exc:
        raise InputError(
            f"serve: {exc.name} is not installed; install the web extra: pip install 'paraplan[web]'"
        ) from None
    if host not in LOCAL_HOSTS:
        print(
            f"warning: serving on {host}: anyone who can reach this address can run searches",
            file=sys.stderr,
        )
    url = f"http://{'localhost' if host in LOCAL_HOSTS else host}:{port}/"
    print(f"paraplan serve: {url} (Ctrl-C stops)", file=sys.stderr)
    if open_page:
        threading.Timer(1.0, webbrowser.open, args=(url,)).start()
    uvicorn.run(create_app(time_limit), host=host, port=port, log_level="warning")
