"""Workers log F2 failures through a QueueHandler/QueueListener and keep going; exit 0.

User program: a feature-extraction service with "production" logging: every thread logs through
logging.handlers.QueueHandler; a QueueListener thread writes the records with a StreamHandler
(format `%(asctime)s [%(threadName)s] %(levelname)s %(name)s: %(message)s`) and a custom
logging.Handler subclass that counts errors. Four worker threads run a torch.compile'd feature
function (backend="eager", warmed up) over batches; on any exception they call
`log.exception("batch %d failed", i)` and continue with the next batch. A "schema" thread keeps
re-deriving the output schema by FX-tracing a small module (torch.fx.symbolic_trace). At the end
the main thread logs `N errors` at WARNING and exits 0.
What should happen: F2. The schema thread's trace sets FX's process-global is-tracing flag; a
worker's compiled call raises `RuntimeError: Detected that you are using FX to symbolically trace a
dynamo-optimized function`. Each failure is logged (message line behind the log prefix, then the
traceback) by the listener thread, not by the thread that failed, and the workers go on. Many
identical tracebacks, exit 0. Expected classification: CRASH (logged exceptions at exit 0), race F2.
"""

import logging
import logging.handlers
import queue
import sys
import threading

import torch
import torch.nn as nn

torch.set_num_threads(1)
log = logging.getLogger("features")


class ErrorCounter(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.ERROR)
        self.count = 0

    def emit(self, record):
        self.count += 1


class Schema(nn.Module):
    def forward(self, x):
        return torch.cat([x.mean(-1, keepdim=True), x.amax(-1, keepdim=True)], dim=-1)


def main():
    records = queue.Queue()
    stream = logging.StreamHandler(sys.stderr)
    stream.setFormatter(logging.Formatter("%(asctime)s [%(threadName)s] %(levelname)s %(name)s: %(message)s"))
    counter = ErrorCounter()
    listener = logging.handlers.QueueListener(records, stream, counter)
    root = logging.getLogger()
    root.addHandler(logging.handlers.QueueHandler(records))
    root.setLevel(logging.INFO)
    listener.start()

    w = torch.randn(24, 24)

    def features(x):
        h = torch.relu(x @ w)
        return torch.cat([h.mean(-1, keepdim=True), h.amax(-1, keepdim=True)], dim=-1)

    extract = torch.compile(features, backend="eager")
    extract(torch.randn(8, 24))
    stop = threading.Event()

    def schema_thread():
        while not stop.is_set():
            torch.fx.symbolic_trace(Schema())

    def worker(shard):
        ok = 0
        for i in range(250):
            try:
                extract(torch.randn(8, 24))
                ok += 1
            except Exception:
                log.exception("batch %d of shard %d failed", i, shard)
        log.info("shard %d done: %d/250 batches ok", shard, ok)

    log.info("starting extraction")
    schema = threading.Thread(target=schema_thread, name="schema")
    schema.start()
    workers = [threading.Thread(target=worker, args=(s,), name=f"extract-{s}") for s in range(4)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    stop.set()
    schema.join()
    log.warning("extraction finished with errors logged")
    listener.stop()
    print(f"{counter.count} errors", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
