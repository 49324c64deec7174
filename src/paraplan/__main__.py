"""``python -m paraplan``: the console entry point."""

from paraplan.cli.main import main

main()
