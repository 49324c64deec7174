"""The typer application, shared option types and helpers of the ``paraplan`` commands.

Each command lives in its own module of this package and registers on ``app`` when imported; ``main``
(in ``paraplan.cli.main``) is the console entry point and imports the module of the command it runs
(``COMMAND_MODULES``).
"""

from __future__ import annotations

import os
import shutil
import sys
from enum import Enum
from typing import Optional, get_args

import typer

from paraplan.cli.declare import optional, switch
from paraplan.io.catalog_files import catalog_names
from paraplan.specs import choices  # the plan's Literal choices: no pydantic model at start-up
from paraplan.specs.errors import InputError
from paraplan.specs.parallel import DEFAULT_PLACEMENT_LABEL
from paraplan.specs.recompute import MODE_NAMES

EXIT_INPUT_ERROR = 2
EXIT_DOES_NOT_FIT = 1  # a plan that does not fit in memory, a search where no plan fits

app = typer.Typer(
    name="paraplan",
    help="How fast will a transformer train on a cluster, and will it fit? An analytical model.\n\n"
    "Exit status: 0 done; 1 estimate's plan does not fit in memory, search finds no plan that fits, or "
    "validate --max-mape is exceeded; 2 bad input (one line on stderr: field, value, what is allowed).",
    no_args_is_help=True,
    add_completion=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)


_OUTPUT: dict[str, int | None] = {"width": None}  # set by --width (0: unlimited)


def _show_version(value: bool) -> None:
    if value:
        from importlib.metadata import version  # here: only --version reads the installed metadata

        print(f"paraplan {version('paraplan')}")
        raise typer.Exit(0)


WIDTH_HELP = (
    "width of text output in characters (0: unlimited, one line per table row); default: the "
    "terminal's, or $COLUMNS, or unlimited when piped"
)
WidthOption = optional(int, "--width", help=WIDTH_HELP, min=0)


@app.callback()
def _root(
    version: switch(
        "--version", help="print the version and exit", is_eager=True, callback=_show_version
    ) = False,
    width: WidthOption = None,
) -> None:
    if width is not None:
        _OUTPUT["width"] = width


def output_width(width: int | None = None) -> int | None:
    """Characters per line of text output: ``--width`` (0 = unlimited); else the terminal's width on a
    terminal, else $COLUMNS when set, else unlimited (piped output keeps one table row per line)."""
    chosen = width if width is not None else _OUTPUT["width"]
    if chosen is not None:
        return chosen or None
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else None


def _choices(name: str, literal) -> type[Enum]:
    """A CLI choice enum from a Literal of the specs (one list of allowed values)."""
    return Enum(name, {v: v for v in get_args(literal)}, type=str)


Recompute = _choices("Recompute", choices.Recompute)
Dtype = _choices("Dtype", choices.PlanDtype)
Schedule = _choices("Schedule", choices.Schedule)
Attention = _choices("Attention", choices.Attention)
GradDtype = _choices("GradDtype", choices.GradDtype)
CPAlgorithm = _choices("CPAlgorithm", choices.CPAlgorithm)
Zero3GatherUnit = _choices("Zero3GatherUnit", choices.Zero3GatherUnit)
Zero3ReduceUnit = _choices("Zero3ReduceUnit", choices.Zero3ReduceUnit)


def warn_positions(model, seq_length: int) -> None:
    """One line on stderr when the sequence is longer than the model's positions (limits.position_warning)."""
    from paraplan.specs.limits import position_warning

    if (warning := position_warning(model, seq_length)) is not None:
        print(f"warning: {warning}", file=sys.stderr)


def _stdout(width: int | None = None):
    """Plain-text stdout at ``output_width(width)`` (report.render.PlainConsole)."""
    from paraplan.report.render import PlainConsole

    return PlainConsole(output_width(width))


class _NoBar:
    """What ``progress_bar`` gives when nothing is shown: rich.progress.Progress's calls, doing nothing."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def add_task(self, description: str, total=None) -> int:
        return 0

    def update(self, task: int, **fields) -> None:
        return None


PROGRESS_ENV = "PARAPLAN_PROGRESS"  # 1: draw progress bars on stderr even when it is no terminal


def want_progress() -> bool:
    """Progress bars (with an ETA) on stderr: on a terminal, or when asked with PARAPLAN_PROGRESS=1."""
    return sys.stderr.isatty() or os.environ.get(PROGRESS_ENV) == "1"


def stderr_console():
    """A rich console on stderr that draws live displays on a terminal or when want_progress asks for them."""
    from rich.console import Console

    return Console(stderr=True, force_terminal=True if want_progress() else None)


def progress_bar(show: bool):
    """A transient progress bar on stderr with the time left and elapsed (rich.progress's default columns,
    TimeRemainingColumn among them) when ``show``, else a stand-in that draws nothing: rich (~35 ms of
    imports, issue 31) loads only when shown."""
    if not show:
        return _NoBar()
    from rich.progress import Progress, TimeElapsedColumn

    return Progress(
        *Progress.get_default_columns(),
        TimeElapsedColumn(),
        console=stderr_console(),
        transient=True,
    )


def _int_list(text: Optional[str], flag: str, most: int | None = None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InputError(f"{flag}: {text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 0:
        raise InputError(f"{flag}: {text!r} must list non-negative integers")
    if most is not None and max(values) > most:  # issue 37: --zero 7 was an internal error
        raise InputError(f"{flag}: {max(values)} is not allowed; allowed: 0 to {most}")
    return values


def _upper_bound(model, name: str) -> int | None:
    """The ``le`` bound of a pydantic field (PlanSpec.zero: 3), so the option and the plan share it."""
    return next((m.le for m in model.model_fields[name].metadata if hasattr(m, "le")), None)


def _choice_list(
    text: Optional[str], flag: str, allowed: tuple[str, ...]
) -> tuple[str, ...] | None:
    if text is None:
        return None
    values = tuple(v.strip() for v in text.split(",") if v.strip())
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise InputError(
            f"{flag}: {text!r} is not allowed; allowed: comma-separated {', '.join(allowed)}"
        )
    return values


# ---- search-space options shared by ``search`` and ``sweep`` ----------------------------------
TpOption = optional(str, "--tp", help="restrict tp to these values, e.g. 1,2,4,8")
PpOption = optional(str, "--pp", help="restrict pp")
CpOption = optional(str, "--cp", help="restrict cp")
MicroBatchOption = optional(str, "--micro-batch", help="restrict micro-batch sizes")
RecomputeOption = optional(
    str,
    "--recompute",
    help="restrict: none,selective,full; op_sac (torchtitan stacks), save_dots (maxtext)",
)
ZeroOption = optional(str, "--zero", help="restrict ZeRO stages, e.g. 0,1")
ScheduleOption = optional(
    str,
    "--schedule",
    help="restrict: 1f1b,gpipe,interleaved,zb-h1,dualpipe (zb-h1 and dualpipe are searched by default "
    "for MoE / MLA / MTP models only)",
)
EpOption = optional(
    str, "--ep", help="restrict the expert-parallel degree (MoE models), e.g. 8,16,32"
)
EtpOption = optional(str, "--etp", help="restrict the expert tensor-parallel degree (MoE models)")
DispatcherOption = optional(
    str,
    "--dispatcher",
    help="restrict: alltoall,allgather,deepep,hybridep (MoE models; default: all but hybridep)",
)
# estimate's plan field and search's fixed input alike (the search prices every plan at it)
ExpertLoadCvOption = optional(
    float,
    "--expert-load-cv",
    help="MoE learned routing: spread (coefficient of variation) of the experts' routing "
    "probabilities, 0 to √(experts/top_k − 1); a search prices every plan at it as estimate does "
    "(default: the published figure of the model's router_balancing, else 0; docs/model.md)",
)
NoOffloadOption = switch("--no-offload", help="do not consider offloading")
DefaultOverlapOption = switch("--default-overlap", help="keep overlap switches at defaults")
DefaultPlacementOption = switch(
    "--default-placement", help=f"only {DEFAULT_PLACEMENT_LABEL} placement"
)
VarySplitOption = switch(
    "--vary-split",
    help="also search the layer split with every schedule: the first / last stage layer counts of "
    "Megatron-LM's accounting switches (embedding, loss and MTP modules counted as layers)",
)


def _framework_help() -> str:
    """The --framework help, naming the catalog's profiles (io.catalog_files, which runs no import of
    the catalog and its pydantic models at start-up, issue 31)."""
    names = catalog_names("frameworks")
    return (
        "implementation profile that sets the framework's defaults (attention kernel, overlaps, runtime "
        f"memory; docs/validation.md): {', '.join(names)}, or a YAML/JSON profile file"
    )


FrameworkOption = optional(str, "--framework", help=_framework_help())


def load_framework_option(framework: Optional[str]):
    """The profile named by --framework (None when not given); an unknown name is one line naming the catalog's."""
    if framework is None:
        return None
    from paraplan.catalog import load_framework

    return load_framework(framework, field="--framework")


def explicit_options(ctx: typer.Context, names: tuple[str, ...]) -> set[str]:
    """The parameters among ``names`` that the user gave (command line or environment), not left at their default."""
    given = set()
    for name in names:
        source = ctx.get_parameter_source(name)
        if source is not None and source.name not in (
            "DEFAULT",
            "DEFAULT_MAP",
        ):  # typer may bundle its own click
            given.add(name)
    return given


def refuse_options(
    ctx: typer.Context, honoured: frozenset[str], where: str, allowed: str | None = None
) -> None:
    """InputError naming every option given (command line or environment) that is not in ``honoured`` (parameter
    names), which the path ``where`` would otherwise ignore; ``allowed`` defaults to the honoured options' flags."""
    options = {p.name: p.opts[0] for p in ctx.command.params}
    given = explicit_options(ctx, tuple(n for n in options if n not in honoured))
    if given:
        named = ", ".join(options[n] for n in options if n in given)
        allowed = allowed or ", ".join(options[n] for n in options if n in honoured)
        raise InputError(f"{named}: not allowed {where}; allowed: {allowed}")


def search_restrictions(
    tp, pp, cp, micro_batch, recompute, zero, schedule, ep=None, etp=None, dispatcher=None
) -> dict:
    """SearchProblem axis restrictions from the shared options (None = unrestricted)."""
    from paraplan.specs.moe_plan import Dispatcher
    from paraplan.specs.plan import PlanSpec

    return {
        "tp": _int_list(tp, "--tp"),
        "pp": _int_list(pp, "--pp"),
        "cp": _int_list(cp, "--cp"),
        "micro_batch": _int_list(micro_batch, "--micro-batch"),
        "recompute": _choice_list(recompute, "--recompute", MODE_NAMES),
        "zero": _int_list(zero, "--zero", most=_upper_bound(PlanSpec, "zero")),
        "schedules": _choice_list(schedule, "--schedule", get_args(choices.Schedule)),
        "ep": _int_list(ep, "--ep"),
        "etp": _int_list(etp, "--etp"),
        "dispatchers": _choice_list(dispatcher, "--dispatcher", get_args(Dispatcher)),
    }


def precision_defaults(ctx: typer.Context, system_spec, names=("dtype", "attention")) -> dict:
    """The dtype and attention the user left at their defaults, chosen for the accelerator
    (specs.rules_precision.default_precision: fp16 and unfused attention on V100 / T4, never bf16 or FlashAttention
    silently), with a note on stderr when that differs from bf16 / flash."""
    return accelerator_precision_defaults(explicit_options(ctx, names), [system_spec.accelerator])


def accelerator_precision_defaults(given: set[str], accelerators) -> dict:
    """The dtype and attention not in ``given``, chosen for every one of ``accelerators`` (a cluster's
    pools: specs.rules_precision.cluster_default_precision), with the note of ``precision_defaults``."""
    from paraplan.specs.rules_precision import cluster_default_precision

    precision, older = cluster_default_precision(accelerators)
    chosen = {k: v for k, v in precision.items() if k not in given}
    if chosen.get("dtype", "bf16") != "bf16" or chosen.get("attention", "flash") != "flash":
        picked = ", ".join(f"--{k} {v}" for k, v in chosen.items())
        print(
            f"note: {older} has no bf16 tensor cores and runs no FlashAttention-2: "
            f"{picked} (give --dtype / --attention to choose)",
            file=sys.stderr,
        )
    return chosen
