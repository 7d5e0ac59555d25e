"""A thread's torch call raises c10::Error (an invalid view); threading.excepthook prints it; exit 1.

Not a race: a real c10::Error for the signature fixtures. With TORCH_SHOW_CPP_STACKTRACES=1 the
message is followed by `Exception raised from infer_size_impl at ... (most recent call first):`
and the C++ frames, which must not change the signature.
"""

import sys
import threading

import torch


def reshape_batch(batch):
    return batch.view(3, 5)


def main():
    done = []
    t = threading.Thread(target=lambda: done.append(reshape_batch(torch.ones(2, 4))), name="loader-0")
    t.start()
    t.join()
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main())
