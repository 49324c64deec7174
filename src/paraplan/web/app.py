"""The web plan explorer's ASGI application (Starlette): the page, its static files, and a JSON API
that calls ``paraplan.api`` only.

Endpoints: ``GET /`` the page; ``GET /static/<file>`` its script, style and Plotly's bundled
``plotly.min.js``; ``GET /api/catalog`` (names and the choice options' values); ``POST
/api/search`` and ``POST /api/sweep`` start a job in a worker process (``{"params": {option:
text}}``, the CLI's option names; a sweep also ``{"sweep-text": definition}``, paraplan sweep's
schema, or the params with ``gpus-list``); ``GET /api/jobs/<id>``
its state, ``GET /api/jobs/<id>/events`` its progress as server-sent events, ``DELETE
/api/jobs/<id>`` cancels it; ``POST /api/estimate`` one plan's detail (breakdown, memory per stage,
collectives, pipeline timeline); ``POST /api/export`` a plan as a framework's arguments.
A bad input answers 400 with the CLI's one-line error and the option it names; a body over
``MAX_BODY`` bytes 413. Nothing on the server's disk is read or written from a request.
"""

from __future__ import annotations

import asyncio
import json
import threading
from contextlib import asynccontextmanager
from pathlib import Path

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from paraplan import api
from paraplan.api import InputError
from paraplan.web import params as page_params
from paraplan.web.jobs import JobManager
from paraplan.web.timeline import timeline

STATIC = Path(__file__).parent / "static"
STATIC_FILES = {"app.js": "text/javascript", "style.css": "text/css", "index.html": "text/html"}
MAX_BODY = 1024 * 1024  # bytes of a request body (a pasted model or system is far smaller)
MAX_PAGE_SWEEP = 32  # GPU counts one sweep of the page runs (the server runs one job at a time)
EXPORT_SUFFIX = {
    "megatron": ".sh",
    "nemo": ".py",
    "megatron-bridge": ".py",
    "torchtitan": ".toml",
    "deepspeed": ".json",
}


class BodyTooLarge(Exception):
    pass


def _plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def bad(exc: InputError, status: int = 400) -> JSONResponse:
    message = str(exc)
    flag = getattr(exc, "flag", None) or page_params.flag_of(message)
    return JSONResponse({"error": {"field": flag, "message": message}}, status_code=status)


async def read_json(request: Request) -> dict:
    """The request's JSON body, at most MAX_BODY bytes (counted as it arrives)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_BODY:
        raise BodyTooLarge
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise BodyTooLarge
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        raise InputError("request: the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise InputError("request: the body must be a JSON object")
    return data


def _params(data: dict) -> dict:
    raw = data.get("params", {})
    if not isinstance(raw, dict) or not all(isinstance(v, (str, int, float)) for v in raw.values()):
        raise InputError("params: must be an object of option names and text values")
    return {str(k): str(v) for k, v in raw.items()}


def guarded(handler):
    """The one error path of every endpoint: InputError -> 400, an oversized body -> 413."""

    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except BodyTooLarge:
            message = f"request: the body is over {MAX_BODY:,} bytes; paste a smaller file"
            return JSONResponse({"error": {"field": None, "message": message}}, status_code=413)
        except InputError as exc:
            return bad(exc)

    return endpoint


async def page(request: Request) -> Response:
    return FileResponse(STATIC / "index.html", media_type="text/html")


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    if name == "plotly.min.js":
        return FileResponse(_plotly_js(), media_type="text/javascript")
    if name not in STATIC_FILES:  # a fixed list: no path from a request reaches the disk
        return JSONResponse({"error": {"field": None, "message": "not found"}}, 404)
    return FileResponse(STATIC / name, media_type=STATIC_FILES[name])


async def catalog(request: Request) -> Response:
    """The catalog's names and the choice options' allowed values (the form's lists)."""
    names = await run_in_threadpool(api.catalog_names)
    return JSONResponse(names | {"choices": page_params.CHOICES})


async def start_search(request: Request) -> Response:
    data = await read_json(request)
    problem = await run_in_threadpool(page_params.parse, _params(data))
    return JSONResponse(request.app.state.jobs.submit("search", problem).public())


async def start_sweep(request: Request) -> Response:
    """A sweep: a pasted sweep definition (``sweep-text``, paraplan sweep's schema), or the page's
    problem over ``gpus-list`` (strong scaling)."""
    data = await read_json(request)
    text = data.get("sweep-text")
    if text:
        if not isinstance(text, str) or len(text) > page_params.MAX_TEXT:
            raise page_params.error(
                "sweep-text", f"text of at most {page_params.MAX_TEXT:,} characters"
            )
        definition, field = text, "sweep-text"
    else:
        problem = await run_in_threadpool(page_params.parse, _params(data))
        definition = page_params.sweep_definition(problem, str(data.get("gpus-list", "")))
        field = "gpus-list"
    return JSONResponse(request.app.state.jobs.submit("sweep", definition, field).public())


def _job(request: Request):
    job = request.app.state.jobs.jobs.get(request.path_params["job"])
    if job is None:
        raise InputError(
            f"job: {request.path_params['job']!r} is not a job of this server (jobs end with the"
            " server that ran them: run the search again from its page's URL)"
        )
    return job


async def job_state(request: Request) -> Response:
    return JSONResponse(_job(request).public())


async def cancel(request: Request) -> Response:
    job = request.app.state.jobs.cancel(_job(request).id)
    return JSONResponse(job.public())


async def events(request: Request) -> Response:
    job = _job(request)

    async def stream():
        seen = -1
        while True:
            if job.version != seen:
                seen = job.version
                yield f"data: {json.dumps(job.public())}\n\n"
            if job.state != "running":
                return
            await asyncio.sleep(0.05)

    return StreamingResponse(stream(), media_type="text/event-stream")


async def estimate(request: Request) -> Response:
    data = await read_json(request)
    problem = await run_in_threadpool(page_params.parse, _params(data))
    return JSONResponse(await run_in_threadpool(plan_detail, problem, data.get("plan")))


async def export(request: Request) -> Response:
    data = await read_json(request)
    problem = await run_in_threadpool(page_params.parse, _params(data))
    to = str(data.get("to", "megatron"))
    if to not in EXPORT_SUFFIX:
        raise InputError(f"to: {to!r} is not allowed; allowed: {', '.join(EXPORT_SUFFIX)}")
    plan = plan_fields(problem, data.get("plan"))
    profile = problem.kwargs.get("framework")  # its fp8 recipe, as `paraplan export --framework`
    text = await run_in_threadpool(
        api.export, plan, to, problem.model, 8, "paraplan serve", profile
    )
    return JSONResponse({"text": text, "filename": f"plan-{to}{EXPORT_SUFFIX[to]}"})


ROUTES = [
    Route("/", page),
    Route("/static/{name}", static),
    Route("/api/catalog", guarded(catalog)),
    Route("/api/search", guarded(start_search), methods=["POST"]),
    Route("/api/sweep", guarded(start_sweep), methods=["POST"]),
    Route("/api/jobs/{job}", guarded(job_state)),
    Route("/api/jobs/{job}", guarded(cancel), methods=["DELETE"]),
    Route("/api/jobs/{job}/events", guarded(events)),
    Route("/api/estimate", guarded(estimate), methods=["POST"]),
    Route("/api/export", guarded(export), methods=["POST"]),
]


def create_app(time_limit_s: float = 300.0) -> Starlette:
    """The application; its job manager (``app.state.jobs``) stops every worker at shutdown."""
    jobs = JobManager(time_limit_s)

    @asynccontextmanager
    async def lifespan(app):
        jobs.warm()
        threading.Thread(target=_warm_estimates, daemon=True).start()
        yield
        jobs.close()

    app = Starlette(routes=ROUTES, lifespan=lifespan)
    app.state.jobs = jobs
    return app


def _warm_estimates() -> None:
    """Load the estimator's modules and tables in the server process (the plan detail's estimates
    run here) before the first plan is opened."""
    api.estimate("gpt3-13b", "dgx-a100-80gb", gpus=8, tp=8, global_batch=64, with_ops=True)


def plan_fields(problem, plan) -> dict:
    """A plan of the page (a search row's ``plan``, a scatter point's, or one edited by "what if")
    completed with the problem's GPUs and sequence length."""
    if not isinstance(plan, dict) or not plan:
        raise InputError("plan: missing; give the plan's fields as an object")
    fields = {k: v for k, v in plan.items() if v is not None}
    fields.setdefault("gpus", problem.gpus)
    fields.setdefault("seq_length", problem.kwargs["seq_length"])
    return fields


def plan_detail(problem, plan) -> dict:
    """One plan's estimate (``paraplan estimate --json --ops``) and its pipeline timeline, drawn from
    the plan's per-stage times and its schedule's order (api.pipeline_stages, web.timeline)."""
    if problem.cluster is not None:
        raise InputError("plan: a cluster search's plans are per-stage plans; the table lists them")
    framework = problem.kwargs.get("framework")
    fields = plan_fields(problem, plan)
    estimated = api.estimate(
        problem.model, problem.system, fields, with_ops=True, framework=framework
    )
    doc = estimated.to_dict(include_ops=True)
    doc["plan_label"] = api.plan_label(estimated.plan)
    pipeline = api.pipeline_stages(problem.model, problem.system, fields, framework=framework)
    doc["timeline"] = timeline(pipeline, api.schedule_order, doc["breakdown"]["bubble_s"])
    return doc
