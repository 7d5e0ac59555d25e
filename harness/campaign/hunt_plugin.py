"""The pytest plugin `harness hunt` loads into each run (`-p harness.campaign.hunt_plugin`).

It adds to each test case of the junit report what junit leaves out: the test's node id and the
threads pytest-run-parallel ran its body in (1, with the plugin's reason, where a marker or the
plugin's own detection kept it in one thread). With HARNESS_HUNT_ONLY (a file of node ids, one a
line) it deselects every other test: the rerun with one thread runs the same arguments, so the
same configuration, on those tests alone. It imports nothing of pytest: pytest finds the hooks by
name.
"""

from __future__ import annotations

import os
from pathlib import Path

ONLY_ENV = "HARNESS_HUNT_ONLY"
RUN_PARALLEL = "_run-parallel"
"""The name pytest-run-parallel registers its plugin object under."""
NODEID, THREADS, SINGLE_REASON = "hunt_nodeid", "hunt_threads", "hunt_single_reason"
"""The junit properties this plugin writes."""


def pytest_collection_modifyitems(config, items) -> None:
    only = os.environ.get(ONLY_ENV)
    if not only:
        return
    keep = set(Path(only).read_text(encoding="utf-8").splitlines())
    dropped = [item for item in items if item.nodeid not in keep]
    items[:] = [item for item in items if item.nodeid in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)


def pytest_runtest_setup(item) -> None:
    props = item.user_properties
    props.append((NODEID, item.nodeid))
    parallel = item.config.pluginmanager.get_plugin(RUN_PARALLEL)
    if parallel is None:
        return
    props.append((THREADS, str(parallel.run_in_parallel.get(item.nodeid, 1))))
    reason = parallel.thread_unsafe.get(item.nodeid)
    if reason:
        props.append((SINGLE_REASON, reason))
