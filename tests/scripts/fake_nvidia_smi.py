"""Stands in for `nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits`.

Prints one `pid, used_memory` line per pid read from $FAKE_NVIDIA_SMI_FILE (one pid a line, or
`pid, MiB`) and from $FAKE_NVIDIA_SMI_PIDS (comma-separated); exits $FAKE_NVIDIA_SMI_RC (0) after
printing `FAKE_NVIDIA_SMI_RC` to stderr when it is not 0. Each call is appended to
$FAKE_NVIDIA_SMI_LOG when set.
"""

import os
import sys


def main() -> int:
    log = os.environ.get("FAKE_NVIDIA_SMI_LOG")
    if log:
        with open(log, "a") as fh:
            fh.write(" ".join(sys.argv[1:]) + "\n")
    rc = int(os.environ.get("FAKE_NVIDIA_SMI_RC", "0"))
    if rc:
        print("NVIDIA-SMI has failed (fake)", file=sys.stderr)
        return rc
    lines = []
    path = os.environ.get("FAKE_NVIDIA_SMI_FILE")
    if path and os.path.exists(path):
        with open(path) as fh:
            lines += [ln.strip() for ln in fh if ln.strip()]
    lines += [p.strip() for p in os.environ.get("FAKE_NVIDIA_SMI_PIDS", "").split(",") if p.strip()]
    for line in lines:
        print(line if "," in line else f"{line}, 512")
    return 0


if __name__ == "__main__":
    sys.exit(main())
