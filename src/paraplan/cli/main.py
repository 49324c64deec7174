"""Console entry point: run ``app`` so that every input problem ends as ONE line on stderr,
``error: <message>``, with exit code 2 (usage errors, InputError, UnitError and pydantic
ValidationError), and no traceback."""

from __future__ import annotations

import sys

import typer
from pydantic import ValidationError

from paraplan.cli import catalog_cmd, estimate_cmd, search_cmd, sweep_cmd, validate_cmd  # noqa: F401  (register commands)
from paraplan.cli import calibrate_cmd, export_cmd, import_cmd  # noqa: F401  (interop commands, issue 11)
from paraplan.cli.app import EXIT_INPUT_ERROR, app
from paraplan.specs.errors import InputError, input_error_from_pydantic
from paraplan.units import UnitError

try:  # recent typer vendors click as typer._click
    from typer._click.exceptions import ClickException, NoArgsIsHelpError
except ImportError:  # pragma: no cover - older typer on top of click
    from click.exceptions import ClickException, NoArgsIsHelpError  # type: ignore[no-redef]
from typer import Abort, Exit


def _one_line(message: str) -> str:
    return " ".join(str(message).split())


def _fail(message: str, code: int = EXIT_INPUT_ERROR) -> None:
    print(f"error: {_one_line(message)}", file=sys.stderr)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run ``app``; input errors -> one stderr line and exit 2."""
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="paraplan", standalone_mode=False)
    except (InputError, UnitError) as exc:
        _fail(str(exc))
    except ValidationError as exc:
        _fail(str(input_error_from_pydantic(exc, "input")))
    except NoArgsIsHelpError as exc:  # bare `paraplan`: show the help
        exc.show()
        sys.exit(exc.exit_code)
    except ClickException as exc:
        _fail(exc.format_message().replace("Value error, ", ""), getattr(exc, "exit_code", 1) or EXIT_INPUT_ERROR)
    except Exit as exc:
        sys.exit(exc.exit_code)
    except Abort:
        _fail("aborted", 1)
    except BrokenPipeError:  # e.g. `paraplan models | head`
        sys.exit(0)
    sys.exit(result if isinstance(result, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()
