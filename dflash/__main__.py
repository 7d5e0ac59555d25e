"""`python -m dflash train [--preset NAME] [--steps N] [--set k=v ...] [--out DIR]`,
`python -m dflash bench`, `python -m dflash plan ...`, `python -m dflash prepare ...`, `python -m dflash export ...`.

Thin entry point: all parsing and the exit-code contract live in dflash.cli.
"""

from dflash.cli import exit_process, main

if __name__ == "__main__":
    exit_process(main())
