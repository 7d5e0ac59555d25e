"""Hits two trainer fault points in a worker thread: it fails only when a plan raises at
`drafter.before_forward`, whatever else the plan does (shrink's deterministic subject)."""

import threading

from harness.runtime.failpoints import fault_point


def step() -> None:
    for _ in range(3):
        fault_point("prefetch.before_put")
        fault_point("drafter.before_forward")


def main() -> None:
    errors = []

    def worker():
        try:
            step()
        except Exception as e:  # the harness's raise action: surface it as the process's failure
            errors.append(e)

    t = threading.Thread(target=worker, name="dflash-train")
    t.start()
    t.join(timeout=30)
    if errors:
        raise errors[0]


if __name__ == "__main__":
    main()
