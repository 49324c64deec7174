"""The page's problem as a query string with the CLI's option names, checked into ``paraplan.api``
arguments.

``/?model=gpt3-175b&system=dgx-a100-80gb&gpus=1024&max-global-batch=1024&seq-length=2048`` is
``paraplan search --model gpt3-175b --system dgx-a100-80gb --gpus 1024 --max-global-batch 1024
--seq-length 2048``; the page adds ``plan=N`` (the open plan's rank), ``compare=M`` (the plan of the
two-plan diff) and ``all=1`` (every feasible plan in the scatter: ``--csv-all``'s scan). A model or
system is a catalog name or YAML/JSON text sent with the request (``model-text``, ``system-text``):
nothing on the server is read from a request. A cluster of node pools (``cluster-text``, the
schema of ``paraplan search --cluster``) replaces system and GPUs and runs the AMP-style search with
the options that search honours (``CLUSTER_OPTIONS``: api.CLUSTER_SEARCH_OPTIONS, the command's own
list). Each bad value raises the CLI's one-line :class:`InputError`, whose ``field`` names the option
(the page shows it next to that field).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from paraplan import api
from paraplan.api import InputError

CHOICES = api.option_choices()  # option -> allowed values, as the CLI's
INT_LISTS = {"tp": "tp", "pp": "pp", "cp": "cp", "micro-batch": "micro_batch", "zero": "zero"}
INT_LISTS |= {"ep": "ep", "etp": "etp"}
CHOICE_LISTS = {
    "recompute": ("recompute", CHOICES["recompute"]),
    "schedule": ("schedules", CHOICES["schedule"]),
    "dispatcher": ("dispatchers", CHOICES["dispatcher"]),
}
SWITCHES = {  # option -> (SearchProblem field, its value when the switch is on)
    "no-offload": ("vary_offload", False),
    "default-overlap": ("vary_overlap", False),
    "default-placement": ("vary_placement", False),
    "vary-split": ("vary_split", True),
}
# the bounds of specs.limits (check_search_bounds); a plan / compare rank is at most the top kept
INTS = {"gpus": (1, api.MAX_GPUS), "seq-length": (1, api.MAX_SEQ_LENGTH), "top": (1, api.MAX_TOP)}
INTS |= {"global-batch": (1, api.MAX_GLOBAL_BATCH), "max-global-batch": (1, api.MAX_GLOBAL_BATCH)}
INTS |= {"plan": (1, api.MAX_TOP), "compare": (1, api.MAX_TOP)}
FLOATS = {"expert-load-cv": None, "time-budget": 0.0}  # option -> its lower bound (the CLI's)
MAX_TEXT = (
    api.MAX_YAML_BYTES
)  # characters of a pasted model, system or cluster: io.strict_yaml's cap
# the options the cluster search honours, by the page's name (the CLI's option name) -> the keyword of
# api.search_cluster: api.CLUSTER_SEARCH_OPTIONS (``paraplan search --cluster``'s), its file (--cluster)
# pasted as cluster-text; with the page's own: a pasted model, the open plan and the diff's
CLUSTER_KEYWORDS = {
    name.replace("_", "-"): keyword
    for name, keyword in api.CLUSTER_SEARCH_OPTIONS.items()
    if name != "cluster"
}
CLUSTER_OPTIONS = set(CLUSTER_KEYWORDS) | {"model-text", "cluster-text", "plan", "compare"}
CLUSTER_ONLY = {"time-budget"}  # read by the cluster search only (a uniform search has no budget)
# every option the page reads; anything else in the query is refused (a typo would otherwise be lost)
KNOWN = {"model", "system", "model-text", "system-text", "cluster-text", "objective", "dtype"}
KNOWN |= {"attention", "framework", "price", "tokens", "all"} | set(INTS) | set(INT_LISTS)
KNOWN |= set(CHOICE_LISTS) | set(SWITCHES) | set(FLOATS) | CLUSTER_OPTIONS
# a search problem's field named by an error (HeteroProblem's 'tps: ...') -> the page's option
FIELD_FLAGS = {keyword: flag for flag, keyword in CLUSTER_KEYWORDS.items()} | {
    "cluster": "cluster-text"
}


def error(flag: str, message: str) -> InputError:
    """The CLI's one-line error for option ``flag`` (``--flag: ...``), its field kept for the page."""
    exc = InputError(f"--{flag}: {message}")
    exc.flag = flag
    return exc


def flag_of(message: str) -> str | None:
    """The page's option a one-line error names ('--gpus: ...', 'model.architecture: ...' -> model)."""
    name = message.split(":", 1)[0].strip().removeprefix("--").split(".", 1)[0].split("[")[0]
    name = FIELD_FLAGS.get(name, name)
    return name if name in KNOWN else None


@dataclass(frozen=True)
class Problem:
    """A checked search problem: ``model`` / ``system`` catalog names or specs, the api.search
    keywords, and the page's own state (plan, compare, all); ``cluster`` a pasted cluster of pools
    (then ``system`` is None and ``kwargs`` the cluster search's)."""

    model: Any
    system: Any
    gpus: int
    kwargs: dict = field(default_factory=dict)
    tokens: float | None = None
    plan: int = 1
    compare: int | None = None
    all_plans: bool = False
    cluster: str | None = None


def _int(params: dict, flag: str) -> int | None:
    text = params.get(flag)
    if text in (None, ""):
        return None
    low, high = INTS[flag]
    try:
        value = int(text)
    except ValueError:
        raise error(flag, f"{text!r} is not an integer") from None
    if not low <= value <= high:
        raise error(flag, f"{value} is not allowed; allowed: {low} to {high:,}")
    return value


def _list(params: dict, flag: str, allowed: tuple | None) -> tuple | None:
    text = params.get(flag)
    if text in (None, ""):
        return None
    values = tuple(v.strip() for v in str(text).split(",") if v.strip())
    if allowed is not None:
        if not values or any(v not in allowed for v in values):
            raise error(
                flag, f"{text!r} is not allowed; allowed: comma-separated {', '.join(allowed)}"
            )
        return values
    try:
        numbers = tuple(int(v) for v in values)
    except ValueError:
        raise error(flag, f"{text!r} is not a comma-separated list of integers") from None
    if not numbers or min(numbers) < 0:
        raise error(flag, f"{text!r} must list non-negative integers")
    return numbers


def _float(params: dict, flag: str) -> float | None:
    """A number option, refused in the CLI's words (cli.main's: the value as given, the bound)."""
    text = params.get(flag)
    if text in (None, ""):
        return None
    try:
        value = float(text)
    except ValueError:
        raise error(
            flag,
            f"{text} is not allowed; must be a valid number, unable to parse string as a number",
        ) from None
    if not math.isfinite(value):
        raise error(flag, f"{text} is not allowed; must be a finite number")
    low = FLOATS[flag]
    if low is not None and value < low:
        raise error(flag, f"{text} is not allowed; must be greater than or equal to {low:g}")
    return value


def _choice(params: dict, flag: str, allowed: tuple, default: str | None) -> str | None:
    value = params.get(flag) or default
    if value is not None and value not in allowed:
        raise error(flag, f"{value!r} is not allowed; allowed: {', '.join(allowed)}")
    return value


def _spec(params: dict, kind: str, names: list[str]):
    """A catalog name, or pasted YAML/JSON text (``<kind>-text``) parsed in memory."""
    text = params.get(f"{kind}-text")
    if text:
        if len(text) > MAX_TEXT:
            raise error(f"{kind}-text", f"{len(text):,} characters; at most {MAX_TEXT:,}")
        try:
            return api.spec_from_text(kind, text, field=f"--{kind}-text")
        except InputError as exc:
            exc.flag = f"{kind}-text"
            raise exc from None
    name = params.get(kind)
    if not name:
        raise error(kind, f"missing; give a catalog name or paste a {kind} file")
    if name not in names:
        near = api.suggestions(name, list(names))
        hint = f"; did you mean {', '.join(near)}?" if near else "; see the catalog list"
        raise error(kind, f"{name!r} is not in the catalog{hint}")
    return name


def parse(params: dict) -> Problem:
    """The problem of a query string (a dict of option -> text); InputError for the first bad option."""
    unknown = sorted(set(params) - KNOWN)
    if unknown:
        raise error(
            unknown[0], f"is not an option of the page; allowed: {', '.join(sorted(KNOWN))}"
        )
    names = api.catalog_names()
    model = _spec(params, "model", names["models"])
    if params.get("cluster-text"):
        return _cluster_problem(params, model, names)
    if given := sorted(k for k in CLUSTER_ONLY if params.get(k)):
        raise error(given[0], "is read by the cluster search only; give a cluster of pools")
    system = _spec(params, "system", names["systems"])
    gpus = _int(params, "gpus")
    if gpus is None:
        raise error("gpus", "missing; give the total number of GPUs")
    batch, most = _int(params, "global-batch"), _int(params, "max-global-batch")
    if (batch is None) == (most is None):
        raise error("global-batch", "give exactly one of --global-batch and --max-global-batch")
    tokens = api.parse_tokens(params["tokens"]) if params.get("tokens") else None
    kwargs: dict[str, Any] = {
        "seq_length": _int(params, "seq-length") or 2048,
        "global_batch": batch,
        "max_global_batch": most,
        "top": _int(params, "top") or 10,
        "objective": _choice(params, "objective", CHOICES["objective"], "time"),
        "dtype": _choice(params, "dtype", CHOICES["dtype"], "bf16"),
    }
    if kwargs["objective"] in CHOICES["objective-needs-tokens"]:
        if tokens is None:
            raise error("tokens", f"--objective {kwargs['objective']} needs the run length")
        if params.get("all") in ("1", "true", "on"):
            raise error("all", f"every feasible plan is not scanned with {kwargs['objective']}")
        kwargs["tokens"] = tokens
    if params.get("attention"):
        kwargs["attention"] = _choice(params, "attention", CHOICES["attention"], None)
    if params.get("framework"):
        kwargs["framework"] = _choice(params, "framework", tuple(names["frameworks"]), None)
    if params.get("price"):
        kwargs["price_per_gpu_hour"] = api.parse_price(params["price"])
    if (cv := _float(params, "expert-load-cv")) is not None:
        kwargs["expert_load_cv"] = cv
    for flag, name in INT_LISTS.items():
        if (values := _list(params, flag, None)) is not None:
            kwargs[name] = values
    for flag, (name, allowed) in CHOICE_LISTS.items():
        if (values := _list(params, flag, allowed)) is not None:
            kwargs[name] = values
    for flag, (name, value) in SWITCHES.items():
        if params.get(flag) in ("1", "true", "on"):
            kwargs[name] = value
    return Problem(
        model,
        system,
        gpus,
        kwargs,
        tokens,
        _int(params, "plan") or 1,
        _int(params, "compare"),
        params.get("all") in ("1", "true", "on"),
    )


def _cluster_problem(params: dict, model, names: dict) -> Problem:
    """A cluster of node pools: the AMP-style search's problem (``paraplan search --cluster``),
    with the options it honours (CLUSTER_KEYWORDS); any other option refused by name, as the CLI
    does. Not given: the page's defaults (seq-length 2048, dtype bf16, top 10, attention flash, or
    the profile's where a framework is given, as the command reads it)."""
    text = params["cluster-text"]
    if len(text) > MAX_TEXT:
        raise error("cluster-text", f"{len(text):,} characters; at most {MAX_TEXT:,}")
    other = sorted(k for k, v in params.items() if v not in (None, "") and k not in CLUSTER_OPTIONS)
    if other:
        raise error(
            other[0],
            "is not available with a cluster of pools (per-stage search); allowed: "
            + ", ".join(sorted(CLUSTER_OPTIONS)),
        )
    if _int(params, "global-batch") is None:
        raise error("global-batch", "missing; the cluster search searches a fixed global batch")
    kwargs: dict[str, Any] = {"seq_length": 2048, "dtype": "bf16", "top": 10}
    for flag, keyword in CLUSTER_KEYWORDS.items():
        if flag != "model" and (value := _value(params, flag, names)) is not None:
            kwargs[keyword] = value
    if "framework" not in kwargs:
        kwargs.setdefault("attention", "flash")
    plan, compare = _int(params, "plan") or 1, _int(params, "compare")
    return Problem(model, None, 0, kwargs, None, plan, compare, False, text)


def _value(params: dict, flag: str, names: dict):
    """The checked value of the page's option ``flag`` (None where not given), read by its kind:
    an integer, a list of integers or of choices, a number, a choice (the catalog's frameworks)."""
    if flag in INTS:
        return _int(params, flag)
    if flag in INT_LISTS or flag in CHOICE_LISTS:
        return _list(params, flag, CHOICE_LISTS[flag][1] if flag in CHOICE_LISTS else None)
    if flag in FLOATS:
        return _float(params, flag)
    allowed = tuple(names["frameworks"]) if flag == "framework" else CHOICES.get(flag)
    if allowed is None:
        raise LookupError(f"the page reads no option {flag!r}")  # a test keeps none such
    return _choice(params, flag, allowed, None)


# the sweep definition's fields (sweep.definition) of the page's search keywords
SWEEP_FIELDS = ("seq_length", "global_batch", "max_global_batch", "dtype", "attention")
SWEEP_FIELDS += ("objective", "framework", "tokens")
SWEEP_AXES = ("tp", "pp", "cp", "micro_batch", "recompute", "zero", "schedules")


def sweep_definition(problem: Problem, gpus: str) -> dict:
    """The sweep definition (``paraplan sweep``'s, sweep.definition) of the page's problem over the
    GPU counts ``gpus`` (``--gpus`` of ``paraplan sweep``: 64,128,256 or 64..1024x2): the best plan
    at each count."""
    if problem.cluster is not None or not isinstance(problem.model, str):
        raise error("gpus-list", "a sweep takes a catalog model and system, not pasted ones")
    if not isinstance(problem.system, str):
        raise error("gpus-list", "a sweep takes a catalog model and system, not pasted ones")
    kwargs = problem.kwargs
    definition = {"model": problem.model, "systems": [problem.system], "gpus": gpus, "top": 1}
    definition |= {k: kwargs[k] for k in SWEEP_FIELDS if kwargs.get(k) is not None}
    if problem.tokens is not None:
        definition["tokens"] = problem.tokens
    definition["restrictions"] = {k: list(kwargs[k]) for k in SWEEP_AXES if k in kwargs}
    for flag, (name, value) in SWITCHES.items():
        if kwargs.get(name) == value:
            definition[flag.replace("-", "_")] = True
    return definition
