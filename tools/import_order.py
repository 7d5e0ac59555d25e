"""Write dflash/import_order.txt: the modules a short CPU run of the trainer imports, in the order
it first imports them. dflash.bytecode's filler compiles these first on a host whose torch ships no
bytecode, so that the main thread finds each one ready when it comes to it.

    python -m tools.import_order            # rewrites dflash/import_order.txt
    python -m tools.import_order --check    # exit 1 if the list misses more than MISSING_OK of a run's

The GPU presets import a few modules more (torch's CUDA paths); those are compiled with the rest,
after the list. A stale list costs a host's first run time, never correctness.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from dflash.bytecode import ORDER, read_order

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ("train", "--preset", "tiny-cpu", "--set", "target.impl=native", "--steps", "2")
MISSING_OK = 0.05
"""--check's tolerance: the share of a run's modules the list may lack."""
_DUMP = """
import sys
from dflash.cli import exit_process, main
code = main(sys.argv[2:])
names = [n for n, m in list(sys.modules.items()) if str(getattr(m, "__file__", "")).endswith(".py")]
with open(sys.argv[1], "w") as f:
    f.write("".join(n + "\\n" for n in names))
exit_process(code)
"""


def imported() -> list[str]:
    """The source modules of one short trainer run, in the order it imported them."""
    with tempfile.TemporaryDirectory() as tmp:
        names = os.path.join(tmp, "names.txt")
        argv = [sys.executable, "-c", _DUMP, names, *TRAIN, "--out", os.path.join(tmp, "run")]
        # No cache of ours in the way: the run imports exactly what it would anywhere.
        env = {**os.environ, "DFLASH_BYTECODE_CACHE": "off"}
        subprocess.run(argv, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return Path(names).read_text().split()


def header() -> str:
    import torch  # only for the header's version: the run itself is a child process

    return (
        "# The modules `python -m dflash train` imports, in the order it first imports them,\n"
        f"# from a short CPU run (torch {torch.__version__}, Python {sys.version.split()[0]}).\n"
        "# dflash.bytecode's filler compiles these first. Written by `python -m tools.import_order`.\n"
    )


def main(argv: list[str]) -> int:
    names = imported()
    if argv[:1] == ["--check"]:
        listed = set(read_order(ORDER)) if os.path.exists(ORDER) else set()
        missing = [n for n in names if n not in listed]
        print(f"{len(missing)} of {len(names)} modules missing from {ORDER}", *missing[:20], sep="\n")
        return 1 if len(missing) > MISSING_OK * len(names) else 0
    Path(ORDER).write_text(header() + "".join(n + "\n" for n in names))
    print(f"{len(names)} modules written to {ORDER}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
