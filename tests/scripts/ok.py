"""Finishes normally: a heartbeat, a metrics line and the final JSON line, exit 0."""

import json
import os


def beat(counter: int) -> None:
    path = os.environ.get("HARNESS_HEARTBEAT")
    if path:
        with open(path + ".tmp", "w") as fh:
            fh.write(f"{counter} 0\n")
        os.replace(path + ".tmp", path)


def main() -> None:
    print(f"pid={os.getpid()}")
    beat(1)
    print(json.dumps({"event": "metrics", "step": 1}))
    print(json.dumps({"event": "final", "tokens_per_s": 1234.5, "tokens_per_s_steady": 1500.0, "steps": 1}))


if __name__ == "__main__":
    main()
