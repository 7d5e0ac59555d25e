"""GPU: one thread captures a CUDA graph with torch.cuda.graph while another thread keeps launching CUDA work.

User program: a latency-optimised server that captures its decode step into a CUDA graph
(torch.cuda.graph on a side stream, the documented recipe) in a "capture" thread, re-capturing a
few times for different batch sizes, while a "preprocess" thread keeps running ordinary CUDA
work (matmuls, a .item() sync, new allocations) on the default stream for incoming requests.
Exceptions are uncaught; the main thread joins and exits 0. Without CUDA it prints
`SKIP: needs CUDA` and exits 0.
What should happen (CUDA): the capture race. torch.cuda.graph captures in
cudaStreamCaptureModeGlobal by default, so the other thread's unsafe calls during a capture
(a synchronize in .item(), a cudaMalloc, work on the legacy default stream) invalidate the
capture or fail themselves, in either thread. Seen on an H200 with torch 2.11 (3 of 3 runs):
`torch.AcceleratorError: CUDA error: operation not permitted when stream is capturing` and
`operation failed due to a previous error during capture` (capture and preprocess threads both
die, `captured 0 graphs`), or `RuntimeError: Offset increment outside graph capture encountered
unexpectedly` in the preprocess thread (its torch.randn met the capture's Philox state) while
the capture itself finished (`captured 8 graphs`). Always exit 0.
Expected classification: CRASH, race capture.
"""

import sys
import threading

import torch

if not torch.cuda.is_available():
    print("SKIP: needs CUDA")
    sys.exit(0)


def main():
    w = torch.randn(1024, 1024, device="cuda")
    stop = threading.Event()
    graphs = []

    def capture():
        try:
            for bs in (8, 16, 32, 64, 8, 16, 32, 64):
                static_in = torch.randn(bs, 1024, device="cuda")
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):  # warm-up on the side stream, as the docs say
                        torch.relu(static_in @ w)
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    static_out = torch.relu(static_in @ w) @ w
                g.replay()
                graphs.append((bs, g, static_in, static_out))
        finally:
            stop.set()

    def preprocess():
        while not stop.is_set():
            x = torch.randn(256, 1024, device="cuda")  # new allocations
            y = (x @ w).softmax(-1)
            float(y[0, 0].item())  # a device sync per request

    print("capturing decode graphs", flush=True)
    threads = [threading.Thread(target=preprocess, name="preprocess"), threading.Thread(target=capture, name="capture")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    print(f"captured {len(graphs)} graphs", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
