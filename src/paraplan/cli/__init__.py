"""Command line: ``paraplan estimate | search | sweep | plot | validate | models | systems``."""

from paraplan.cli.app import app
from paraplan.cli.main import main

__all__ = ["app", "main"]
