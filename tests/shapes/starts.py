"""Each start and each ending as program text. A start defines `run_all(job)` (every item's job
run, returning when all are done) and `WORKLOAD` (the function main calls for the failed count);
an ending is the code main runs before its work (`BEFORE`) and after it (`AFTER`)."""

from __future__ import annotations

THREADS = """
def run_all(job):
    workers = [threading.Thread(target=job, args=(i,), name=f"worker-{i}") for i in range(ITEMS)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
"""

IN_PROCESS = "\nWORKLOAD = workload\n"

CHILD = """

def child_main(count):
    truth(event="start")
    try:
        count.value = workload()
    finally:
        truth(event="end")


def in_child():
    # The threads run in a spawned child process; its failed count comes back in shared memory.
    ctx = multiprocessing.get_context("spawn")
    count = ctx.Value("i", -1)
    child = ctx.Process(target=child_main, args=(count,), name="child")
    child.start()
    child.join()
    return count.value if child.exitcode == 0 and count.value >= 0 else ITEMS


WORKLOAD = in_child
"""

STARTS = {
    "thread": THREADS + IN_PROCESS,
    "executor-map": """
def run_all(job):
    with ThreadPoolExecutor(max_workers=ITEMS, thread_name_prefix="worker") as pool:
        list(pool.map(job, range(ITEMS)))
"""
    + IN_PROCESS,
    "executor-submit": """
def run_all(job):
    with ThreadPoolExecutor(max_workers=ITEMS, thread_name_prefix="worker") as pool:
        futures = [pool.submit(job, i) for i in range(ITEMS)]
        settle(futures)
"""
    + IN_PROCESS,
    "to-thread": """
def run_all(job):
    async def gather():
        await asyncio.gather(*(asyncio.to_thread(job, i) for i in range(ITEMS)))

    asyncio.run(gather())
"""
    + IN_PROCESS,
    "daemon": """
def run_all(job):
    finished = queue.Queue()

    def run(i):
        try:
            job(i)
        finally:
            finished.put(i)

    for i in range(ITEMS):
        threading.Thread(target=run, args=(i,), name=f"worker-{i}", daemon=True).start()
    for _ in range(ITEMS):
        finished.get(timeout=120)  # waits on the queue, never joins
"""
    + IN_PROCESS,
    "child": THREADS + CHILD,
}

ENDINGS = {
    "exit-0": ("", "    return 0\n"),
    "exit-code": ("", "    return 1 if failures else 0\n"),
    "thread-sys-exit": (
        "",
        """    # sys.exit in a thread ends that thread only, quietly
    finisher = threading.Thread(target=sys.exit, args=(1 if failures else 0,), name="finisher")
    finisher.start()
    finisher.join()
    return 0
""",
    ),
    "os-exit": ("", "    sys.stdout.flush()\n    sys.stderr.flush()\n    os._exit(0)\n"),
    "non-daemon-wait": (
        """    never = threading.Event()  # nobody sets it: interpreter exit waits on the flusher forever
    flusher = threading.Thread(target=flush_until, args=(never,), name="flusher")
    flusher.start()
""",
        "    return 0\n",
    ),
}
