"""The pytest plugin `harness hunt` loads into each run (`-p harness.campaign.hunt.plugin`).

It adds to each test case of the junit report what junit leaves out: the test's node id and the
threads pytest-run-parallel ran its body in (1, with the plugin's reason, where a marker or the
plugin's own detection kept it in one thread). Its files are named relative to the run's own
folder (HARNESS_TRIAL_DIR), so that a run writes them where it runs, on a Ray node too: with
HARNESS_HUNT_JUNIT (a name) the junit report goes there. With HARNESS_HUNT_ONLY (a file of node
ids, one a line) it deselects every other test: the rerun with one thread runs the same arguments,
so the same configuration, on those tests alone. With HARNESS_HUNT_PROGRESS (a file) it writes, a
JSON line each, the tests collected, each test as it starts and each as it ends with its outcome and failure
text: a run that crashes writes no junit report, and this says which tests ended how, which one
was running, and which never ran. Unless HARNESS_HUNT_DETECT_IN_TORCH=1, pytest-run-parallel's
reading of a test's callees for thread-unsafe calls stops at torch's own functions. It imports
nothing of pytest: pytest finds the hooks by name.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from harness.trial.folder import TRIAL_DIR_ENV

JUNIT_ENV = "HARNESS_HUNT_JUNIT"
ONLY_ENV = "HARNESS_HUNT_ONLY"
PROGRESS_ENV = "HARNESS_HUNT_PROGRESS"
DETECT_IN_TORCH_ENV = "HARNESS_HUNT_DETECT_IN_TORCH"
RUN_PARALLEL = "_run-parallel"
"""The name pytest-run-parallel registers its plugin object under."""
NODEID, THREADS, SINGLE_REASON = "hunt_nodeid", "hunt_threads", "hunt_single_reason"
"""The junit properties this plugin writes."""


def pytest_configure(config) -> None:
    # Called before junitxml's own (a `-p` plugin registers after pytest's, and pluggy calls the
    # later first), which reads the path.
    junit = os.environ.get(JUNIT_ENV)
    if junit:
        config.option.xmlpath = str(in_run_folder(junit))
    if os.environ.get(DETECT_IN_TORCH_ENV) != "1":
        stop_detection_at_torch()


def in_run_folder(name: str) -> Path:
    """A file named by the hunt: in the run's own folder (a relative name), or where it says."""
    return Path(os.environ.get(TRIAL_DIR_ENV, ".")) / name


def stop_detection_at_torch() -> bool:
    """pytest-run-parallel keeps a test in one thread when the test, or a function it calls two
    levels down, calls mock.patch and the like. Through `torch.compile` that reading reaches
    torch's own `mock.patch.object` (torch/__init__.py), so every test that compiles ran alone:
    the races a hunt is for. torch's internals are what is under test, not the test's own
    thread-unsafety; the test's own calls, markers and fixtures are still read. False where this
    pytest-run-parallel has no such function (its detection is then left whole)."""
    try:
        # pytest's plugin: the harness reads this module's names without importing pytest
        from pytest_run_parallel import plugin, thread_unsafe_detection
    except ImportError:
        return False
    original = getattr(thread_unsafe_detection, "identify_thread_unsafe_nodes", None)
    if original is None or not hasattr(plugin, "identify_thread_unsafe_nodes"):
        return False
    if getattr(original, "stops_at_torch", False):
        return True

    def identify(fn, *args, **kwargs):
        if _defined_in_torch(fn):
            return False, None
        return original(fn, *args, **kwargs)

    identify.stops_at_torch = True
    thread_unsafe_detection.identify_thread_unsafe_nodes = identify  # the recursion's name
    plugin.identify_thread_unsafe_nodes = identify  # the first call's name
    return True


def _defined_in_torch(fn) -> bool:
    module = getattr(fn, "__module__", None)
    return isinstance(module, str) and module.split(".", 1)[0] == "torch"


def pytest_collection_modifyitems(config, items) -> None:
    only = os.environ.get(ONLY_ENV)
    if not only:
        return
    keep = set(in_run_folder(only).read_text(encoding="utf-8").splitlines())
    dropped = [item for item in items if item.nodeid not in keep]
    items[:] = [item for item in items if item.nodeid in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)


def pytest_collection_finish(session) -> None:
    _progress({"collected": [item.nodeid for item in session.items]})


def pytest_runtest_setup(item) -> None:
    props = item.user_properties
    props.append((NODEID, item.nodeid))
    parallel = item.config.pluginmanager.get_plugin(RUN_PARALLEL)
    if parallel is not None:
        props.append((THREADS, str(parallel.run_in_parallel.get(item.nodeid, 1))))
        reason = parallel.thread_unsafe.get(item.nodeid)
        if reason:
            props.append((SINGLE_REASON, reason))
    _progress({"start": item.nodeid, **_props(props)})


_REPORTS: dict[str, list] = {}
"""Each running test's phase reports (setup, call, teardown), until it ends."""


def pytest_runtest_logreport(report) -> None:
    if os.environ.get(PROGRESS_ENV):
        _REPORTS.setdefault(report.nodeid, []).append(report)


def pytest_runtest_logfinish(nodeid, location) -> None:
    reports = _REPORTS.pop(nodeid, [])
    if reports:
        _progress({"end": nodeid, **_props(reports[0].user_properties), **_ending(reports)})


def _ending(reports: list) -> dict[str, str]:
    """The test's outcome over its phases, as junit gives it: a failing call `failed`, a failing
    setup or teardown `error`; its failure's first line and its text with the captured output."""
    bad = next((r for r in reports if r.failed), None)
    if bad is None:
        return {"outcome": "skipped" if any(r.skipped for r in reports) else "passed"}
    crash = getattr(bad.longrepr, "reprcrash", None)
    text = "\n".join([bad.longreprtext, *(content for _, content in bad.sections)])
    message = getattr(crash, "message", None) or next(iter(bad.longreprtext.strip().splitlines()), "")
    return {"outcome": "failed" if bad.when == "call" else "error", "message": message, "text": text}


def _props(props) -> dict[str, str]:
    names = {THREADS: "threads", SINGLE_REASON: "single_reason"}
    return {names[k]: v for k, v in props if k in names}


def _progress(line: dict) -> None:
    name = os.environ.get(PROGRESS_ENV)
    if name:
        with open(in_run_folder(name), "a", encoding="utf-8") as f:  # closed at once: a crash after it loses nothing
            f.write(json.dumps(line) + "\n")
