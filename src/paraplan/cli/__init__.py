"""Command line: ``paraplan estimate | search | sweep | plot | validate | models | systems``."""

from paraplan.cli.app import app
from paraplan.cli.main import console_main, main

__all__ = ["app", "console_main", "main"]
