"""A job in Inductor's compile-worker subprocess pool fails; the thread waiting on it dies of
torch's SubprocException, whose message carries the job's own traceback; exit 1.

Not a race: a real SubprocException (torch/_inductor/compile_worker/subproc_pool.py) for the
signature fixtures, from the pool Inductor compiles Triton kernels in on a GPU; here the job is
`operator.truediv(1, 0)`. Starting the pool takes about 20 s.
"""

import operator
import sys
import threading

from torch._inductor.async_compile import AsyncCompile


def main():
    done = []

    def compile_kernels():
        done.append(AsyncCompile.process_pool().submit(operator.truediv, 1, 0).result())

    t = threading.Thread(target=compile_kernels, name="compiler-0")
    t.start()
    t.join()
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main())
