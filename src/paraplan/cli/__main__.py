"""``python -m paraplan.cli``: the console entry point."""

from paraplan.cli.main import console_main

console_main()
