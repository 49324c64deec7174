"""``python -m paraplan``: the console entry point."""

from paraplan.cli.main import console_main

console_main()
