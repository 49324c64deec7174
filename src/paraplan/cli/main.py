"""Console entry point: run ``app`` so that every failure ends as ONE line on stderr,
``error: <message>``, and no traceback.

Exit codes: 0 success; 1 a result that is not a success (the validation gate failed, ...);
2 anything else: bad input (usage errors, InputError, UnitError, pydantic ValidationError), a file
that cannot be read or written (full disk, permissions), a number beyond what the model can
represent, and — as a last resort — an internal error, reported as ``error: internal error: ...``
(set ``PARAPLAN_DEBUG=1`` to get the traceback instead); 130 interrupted (Ctrl-C)."""

from __future__ import annotations

import atexit
import contextlib
import copy
import errno
import functools
import gc
import importlib
import math
import os
import re
import sys
import threading

import typer

from paraplan.cli.app import EXIT_INPUT_ERROR, app
from paraplan.io.collector import promote_to_oldest
from paraplan.specs.errors import InputError, input_error_from_pydantic
from paraplan.units import UnitError

try:  # recent typer vendors click as typer._click
    from typer._click.exceptions import ClickException, NoArgsIsHelpError
except ImportError:  # pragma: no cover - older typer on top of click
    from click.exceptions import ClickException, NoArgsIsHelpError  # type: ignore[no-redef]
from typer import Abort, Exit


_SPEC_FIELD = {
    "PlanSpec": ("plan", "paraplan.specs.plan"),
    "ModelSpec": ("model", "paraplan.specs.model"),
    "SystemSpec": ("system", "paraplan.specs.system"),
}  # pydantic title -> field prefix, the module of the class


def _pydantic_error(exc) -> InputError:
    """A ValidationError no loader turned into an InputError, as one line naming the spec's field (the
    spec's class, loaded by then, lets specs.errors collapse a union's branch errors)."""
    field, module = _SPEC_FIELD.get(exc.title, ("input", None))
    schema = getattr(sys.modules.get(module or ""), exc.title, None)
    return input_error_from_pydantic(exc, field, schema)


def _one_line(message: str) -> str:
    """Whitespace collapsed and control characters (terminal escape codes) shown escaped."""
    text = " ".join(str(message).split())
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def _fail(message: str, code: int = EXIT_INPUT_ERROR) -> None:
    print(f"error: {_one_line(message)}", file=sys.stderr)
    sys.exit(code)


def _require_finite_numbers(command) -> None:
    """Every number option of every command must be finite: ``--price inf`` or ``--max-mape nan``
    would otherwise flow into the results as 'inf' (issue 13)."""
    for sub in getattr(command, "commands", {}).values():
        for param in sub.params:
            process = param.process_value

            def checked(ctx, value, _process=process, _param=param):
                value = _process(ctx, value)
                if isinstance(value, float) and not math.isfinite(value):
                    raise InputError(
                        f"{_param.opts[0]}: {value} is not allowed; must be a finite number"
                    )
                return value

            param.process_value = checked


def _refuse_repeated_options(command, args: list[str]) -> None:
    """InputError for an option given twice that takes one value (click would keep the last one
    silently); options declared ``multiple`` (``--system``, ``--set``, ``--cases``) may repeat."""
    sub = getattr(command, "commands", {}).get(args[0]) if args else None
    if sub is None:
        return
    names: dict[str, str] = {}
    for param in sub.params:
        if getattr(param, "multiple", False) or not hasattr(param, "opts"):
            continue
        for opt in (*param.opts, *getattr(param, "secondary_opts", ())):
            if opt.startswith("-"):
                names[opt] = param.opts[0]
    seen: set[str] = set()
    for arg in args[1:]:
        if arg == "--":
            break
        key = names.get(arg.split("=", 1)[0] if arg.startswith("--") else arg)
        if key is None:
            continue
        if key in seen:
            raise InputError(f"{key}: given more than once; give it once")
        seen.add(key)


_RANGE_MESSAGE = re.compile(r"^Invalid value for '([^']+)': Input should be (.+)$")


def _with_given_value(message: str, exc: ClickException, args: list[str]) -> str:
    """A bad option value's message naming the value given (click's range messages name only the option and the
    range): "--top: 0 is not allowed; must be greater than or equal to 1"."""
    opts = getattr(getattr(exc, "param", None), "opts", None) or ()
    given = None
    for i, arg in enumerate(args):
        for opt in opts:
            if arg == opt and i + 1 < len(args):
                given = args[i + 1]
            elif arg.startswith(opt + "="):
                given = arg[len(opt) + 1 :]
    if given is None:
        return message
    found = _RANGE_MESSAGE.match(message)
    if found:
        return f"{found.group(1)}: {given} is not allowed; must be {found.group(2)}"
    return message if given in message else f"{message} (given: {given!r})"


# the module of paraplan.cli that registers each command or command group on ``app``, in the order
# --help lists them; a run imports the module of the command it runs only (each command module
# imports its own dependencies, ~0.1 s of compiling and loading the others', issue 31);
# tests/cli/test_startup_imports.py checks that this names every command
COMMAND_MODULES = {
    "models": "catalog_cmd",
    "systems": "catalog_cmd",
    "schema": "catalog_cmd",
    "estimate": "estimate_cmd",
    "search": "search_cmd",
    "sweep": "sweep_cmd",
    "plot": "sweep_cmd",
    "validate": "validate_cmd",
    "calibrate": "calibrate_cmd",  # the interop commands, issue 11
    "export": "export_cmd",
    "import": "import_cmd",
    "serve": "serve_cmd",  # the web explorer, issue 35
}
_MODULE_ORDER = tuple(dict.fromkeys(COMMAND_MODULES.values()))


def _register(name: str | None) -> None:
    """Import the command module of ``name`` (its commands register on ``app``), or every command
    module when ``name`` is no command (no name, an option, a typo: the help lists them all)."""
    modules = (COMMAND_MODULES[name],) if name in COMMAND_MODULES else _MODULE_ORDER
    for module in modules:
        importlib.import_module(f"paraplan.cli.{module}")


@functools.cache
def _command(name: str | None = None):
    """The click command of ``app``, built once per process (typer rebuilds it from the function
    signatures on every call; click commands are reusable across invocations). With ``name``, one of
    app's commands, the group holds that command only: typer builds each command's options from its
    signature (~40 ms for all of them, issue 31), and a run needs the one it runs; the group's own
    options (--version, --width, --help) are the same."""
    _register(name)
    command = typer.main.get_command(_app_with(name))
    _absent_options_uncoerced(command)
    _require_finite_numbers(command)
    return command


def _absent_options_uncoerced(command) -> None:
    """An option left out (None) is processed without typer's coercion, which gives None for None
    whatever the type: typer first builds the option's pydantic TypeAdapter, and the first one
    loads pydantic and its plugins' metadata (~0.1 s of ``paraplan estimate --help``, whose group
    options ``--width``, ``--help`` and the completion ones are processed before the help; issue
    31). Its callback still runs; options that are required or take several values keep typer's
    path."""
    help_option = command.get_help_option(
        typer.Context(command, **(command.context_settings or {}))
    )
    for param in (*command.params, *([help_option] if help_option is not None else [])):
        if param.multiple or param.nargs != 1 or param.required:
            continue

        def process_value(ctx, value, _process=param.process_value, _param=param):
            if value is not None:
                return _process(ctx, value)
            return None if _param.callback is None else _param.callback(ctx, _param, None)

        param.process_value = process_value
    for sub in getattr(command, "commands", {}).values():
        _absent_options_uncoerced(sub)


def _app_with(name: str | None) -> typer.Typer:
    """``app`` with only its command or command group ``name``; ``app`` itself when it has none of
    that name (no name, an option, a typo: click's usage and suggestions need them all)."""
    commands = [
        c
        for c in app.registered_commands
        if (c.name or typer.main.get_command_name(c.callback.__name__)) == name
    ]
    groups = [g for g in app.registered_groups if g.name == name]
    only = copy.copy(app)
    if not commands and not groups:  # every command, in COMMAND_MODULES' order whatever ran first
        commands = sorted(app.registered_commands, key=_listed_at)
        groups = sorted(
            app.registered_groups, key=lambda g: _MODULE_ORDER.index(COMMAND_MODULES[g.name])
        )
    only.registered_commands, only.registered_groups = commands, groups
    return only


def _listed_at(command) -> int:
    """Where ``--help`` lists a registered command: its module's place in COMMAND_MODULES."""
    module = command.callback.__module__.rsplit(".", 1)[-1]
    return _MODULE_ORDER.index(module) if module in _MODULE_ORDER else len(_MODULE_ORDER)


EXIT_CLOSED_PIPE = (
    128 + 13
)  # what a shell reports for a writer SIGPIPE ended (`yes | head -1`: 141)


def _is_closed_pipe(exc: BaseException | None) -> bool:
    return isinstance(exc, BrokenPipeError) or (
        isinstance(exc, OSError) and exc.errno == errno.EPIPE
    )


def _closed_pipe() -> None:
    """The reader of stdout went away (``paraplan search ... | head -1``): end quietly, no message
    and no traceback, with the status a shell gives a writer that SIGPIPE ends (141), as ``yes``,
    ``cat`` or ``seq`` do; never 1, which means "no plan fits". stdout is pointed at the null
    device first, so the interpreter's last flush has nothing to complain about."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
    except (
        OSError,
        ValueError,
        AttributeError,
    ):  # no real stdout (embedded, captured): nothing to do
        pass
    sys.exit(EXIT_CLOSED_PIPE)


class _NoValidationError(Exception):
    """Stands for pydantic's ValidationError while pydantic is not loaded: then none can have been raised."""


def _validation_error() -> type[Exception]:
    """pydantic's ValidationError (pydantic_core's), once loaded: start-up loads no pydantic (issue 31)."""
    core = sys.modules.get("pydantic_core")
    return _NoValidationError if core is None else core.ValidationError


# A command collects cyclic garbage once this many objects have been allocated (CPython's default, 700, made
# start-up walk the ~100k objects of its imports, typer's commands and the catalog ~90 times, once in a full
# collection: ~50 ms of CPU of a search's ~0.45 s start-up, issue 31). Start-up now triggers no collection; a
# long command (validate, sweep, serve) still collects, at most this many allocations late.
COLLECT_AFTER = 100_000


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run ``app`` under :func:`command_settings`; input errors -> one stderr line and
    exit 2."""
    with command_settings():
        _main(list(sys.argv[1:] if argv is None else argv))


@contextlib.contextmanager
def command_settings():
    """The process settings a command runs under (benchmarks/cli_startup.py measures a search's start-up under
    them too). The cyclic collector runs every COLLECT_AFTER allocations meanwhile; after, what the command
    allocated is in the oldest generation (io.collector.promote_to_oldest) and the caller's thresholds are back."""
    # a command does no multi-threaded linear algebra: the OpenBLAS thread pool numpy starts when it loads
    # costs ~0.04 s of CPU per process for nothing (issue 31); nor do its specs take pydantic plugins
    # (third-party validation hooks, found by scanning every installed distribution's entry points when the
    # first model is built: ~6 ms; typer turns them off for its own adapters). Set by the command, not on
    # import (a library user's process keeps its settings); a value the user set wins.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    thresholds = gc.get_threshold()
    gc.set_threshold(COLLECT_AFTER, *thresholds[1:])
    try:
        yield
    finally:
        # what the command allocated (start-up's ~100k objects and its work's) joins the oldest generation before
        # the 700-allocation threshold is back: else the next allocation starts a young collection that walks
        # them all (25-60 ms after `paraplan estimate`, issue 31)
        promote_to_oldest()
        gc.set_threshold(*thresholds)


def _main(args: list[str]) -> None:
    command = _command(args[0] if args else None)
    try:
        _refuse_repeated_options(command, args)
        result = command.main(args=args, prog_name="paraplan", standalone_mode=False)
    except SystemExit as exc:  # typer turns a closed pipe (EPIPE) into exit 1, "no plan fits"
        if _is_closed_pipe(exc.__context__):
            _closed_pipe()
        raise
    except (InputError, UnitError) as exc:
        _fail(str(exc))
    except _validation_error() as exc:
        _fail(str(_pydantic_error(exc)))
    except NoArgsIsHelpError as exc:  # bare `paraplan`: show the help
        exc.show()
        sys.exit(exc.exit_code)
    except ClickException as exc:
        _fail(
            _with_given_value(exc.format_message().replace("Value error, ", ""), exc, args),
            getattr(exc, "exit_code", 1) or EXIT_INPUT_ERROR,
        )
    except Exit as exc:
        sys.exit(exc.exit_code)
    except Abort:
        _fail("aborted", 1)
    except BrokenPipeError:  # e.g. `paraplan models | head`
        _closed_pipe()
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except OSError as exc:  # a full disk, a vanished directory, ...: the files we write are atomic
        where = f" {exc.filename!r}" if getattr(exc, "filename", None) else ""
        _fail(f"cannot read or write{where}: {exc.strerror or exc}")
    except (OverflowError, RecursionError, MemoryError) as exc:
        _fail(f"the input is beyond what paraplan can represent ({type(exc).__name__}: {exc})")
    except Exception as exc:  # noqa: BLE001 - the last resort: one line, never a traceback
        if os.environ.get("PARAPLAN_DEBUG"):
            raise
        _fail(
            f"internal error: {type(exc).__name__}: {exc} (please report; PARAPLAN_DEBUG=1 shows the traceback)"
        )
    sys.exit(result if isinstance(result, int) else 0)


def console_main() -> None:
    """The ``paraplan`` command: ``main()``, then the process ends without tearing down the interpreter's objects
    (os._exit, after flushing the output and running the atexit handlers). A search leaves millions of memoised
    costings, and deallocating them one by one at interpreter shutdown took ~1.5 s after the plans were printed
    (DeepSeek-V3 on 2,048 GPUs). With another non-daemon thread alive, or an exit message, it exits as usual."""
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code
    if code is None:
        code = 0
    others = [
        t
        for t in threading.enumerate()
        if t is not threading.main_thread() and not t.daemon and t.is_alive()
    ]
    if not isinstance(code, int) or others:
        sys.exit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # the reader went away after the last write
        _closed_pipe()
    except ValueError:  # a closed stream: the usual exit reports it
        sys.exit(code)
    atexit._run_exitfuncs()  # what the interpreter would run at exit (multiprocessing's, logging's, ...)
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    console_main()
