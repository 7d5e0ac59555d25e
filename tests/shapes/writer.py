"""A standalone Python program written from a Shape.

The program writes its own ground truth, apart from how it reports: each exception a worker's item
raised (`{"event": "fault", ...}`), the racing partner's own errors (`"partner"`), and a `start`
and an `end` line per process, one JSON line each, to `$SHAPES_TRUTH/<run>.jsonl` (`<run>`: the
first process's pid, which a child inherits). Without SHAPES_TRUTH it writes nothing.
"""

from __future__ import annotations

from pathlib import Path

from tests.shapes import faults, reports, starts
from tests.shapes.shape import Shape

ITEMS = 3
"""Worker items: one per worker thread."""

HEAD = '''"""Generated program (tests/shapes): start={start}, report={report}, fault={fault}, ending={ending}."""

import asyncio
import json
import logging
import multiprocessing
import os
import queue
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

import torch
import torch.nn as nn

torch.set_num_threads(1)
sys.setswitchinterval(1e-6)  # a worker meets the partner inside its window within the first calls
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(threadName)s: %(message)s")
log = logging.getLogger("shape")
ITEMS = {items}
WORK_S = {work_s}


def truth(**fields):
    """One line of what this process observed, for the generator; not how the program reports."""
    folder = os.environ.get("SHAPES_TRUTH")
    if not folder:
        return
    run = os.environ.setdefault("SHAPES_RUN", str(os.getpid()))
    fields["pid"] = os.getpid()
    with open(os.path.join(folder, run + ".jsonl"), "a") as f:
        f.write(json.dumps(fields) + "\\n")


def said(exc):
    return f"{{type(exc).__name__}}: {{exc}}"[:500]
'''

BODY = '''

def run_item(state, item):
    """One item's work; what it raises is recorded before any report sees it."""
    try:
        work(state, item)
    except BaseException as exc:
        truth(event="fault", item=item, error=said(exc))
        raise


def partner_loop(state, stop):
    try:
        partner(state, stop)
    except Exception as exc:
        truth(event="partner", error=said(exc))


def workload():
    """The threaded part: how many items failed."""
    install()
    state = setup()
    results = {}
    stop = threading.Event()
    helper = None
    if partner is not None:
        helper = threading.Thread(target=partner_loop, args=(state, stop), name="partner", daemon=True)
        helper.start()
    try:
        run_all(make_job(state, results))
    finally:
        stop.set()
        if helper is not None:
            helper.join(10)
    finish()
    return ITEMS - len(results)


def flush_until(never):
    while not never.wait(0.5):
        pass
'''

MAIN = """

def main():
    truth(event="start")
{before}    try:
        failures = WORKLOAD()
    finally:
        truth(event="end")
    print(f"done: {{ITEMS - failures}} of {{ITEMS}} items", flush=True)
{after}

if __name__ == "__main__":
    sys.exit(main())
"""


def program(shape: Shape) -> str:
    """The program's source text."""
    if shape.why_invalid():
        raise ValueError(f"{shape.name}: {shape.why_invalid()}")
    before, after = starts.ENDINGS[shape.ending]
    return "".join(
        (
            HEAD.format(
                start=shape.start,
                report=shape.report,
                fault=shape.fault,
                ending=shape.ending,
                items=ITEMS,
                work_s=faults.WORK_S[shape.fault],
            ),
            faults.SOURCES[shape.fault],
            reports.SOURCES[shape.report],
            BODY,
            starts.STARTS[shape.start],
            MAIN.format(before=before, after=after),
        )
    )


def write(shape: Shape, folder: Path) -> Path:
    """The program as `<folder>/<shape name>.py`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{shape.name}.py"
    path.write_text(program(shape))
    return path
