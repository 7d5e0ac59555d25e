"""One module per `python -m harness` command: `HELP` (one line), `add_arguments(parser)` and
`run(opts) -> int`. `harness.cli.COMMANDS` lists them; a command only parses, calls the
subsystems and prints, so nothing below imports from here."""
