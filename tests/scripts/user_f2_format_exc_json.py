"""User program: a daemon worker logs `traceback.format_exc()` on the same line as its prefix, the
main thread prints a JSON status line and exits 1 (F2 / R1).

`log.error("worker error: " + traceback.format_exc())` puts the log prefix in front of
`Traceback (most recent call last):`; the JSON line comes last. The failure is F2: another
thread's torch.fx.symbolic_trace holds FX's process-global tracing flag (pytorch/pytorch#126024).
"""

import json
import logging
import sys
import threading
import traceback

import torch
from f2_parts import compiled_scorer, trace_until

log = logging.getLogger("batcher")
sys.setswitchinterval(1e-6)
torch.set_num_threads(1)


def main():
    logging.basicConfig(format="[%(asctime)s] %(levelname)s %(name)s - %(message)s")
    model, batch = compiled_scorer()
    stop, status = threading.Event(), {"served": 0, "error": None}

    def serve():
        try:
            for _ in range(3000):
                model(batch)
                status["served"] += 1
        except Exception as exc:
            log.error("worker error: " + traceback.format_exc())
            status["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            stop.set()

    threading.Thread(target=trace_until, args=(stop,), daemon=True).start()
    worker = threading.Thread(target=serve, daemon=True)
    worker.start()
    worker.join(timeout=60)
    print(json.dumps({"event": "batch_done", **status}), flush=True)
    return 1 if status["error"] else 0


if __name__ == "__main__":
    sys.exit(main())
