"""Stands in for `nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits`
and for the same query with `pid,gpu_uuid,used_memory`.

Prints one line per pid read from $FAKE_NVIDIA_SMI_FILE (one pid a line, `pid, MiB` or
`pid, GPU-uuid, MiB`) and from $FAKE_NVIDIA_SMI_PIDS (comma-separated): `pid, used_memory`, or
`pid, gpu_uuid, used_memory` when the query asks for the uuid (GPU-fake-0 and 512 MiB where the
line names none); exits $FAKE_NVIDIA_SMI_RC (0) after printing `FAKE_NVIDIA_SMI_RC` to stderr when
it is not 0. Each call is appended to $FAKE_NVIDIA_SMI_LOG when set.
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
    with_uuid = any("gpu_uuid" in arg for arg in sys.argv[1:])
    for line in lines:
        fields = [f.strip() for f in line.split(",")]
        pid, mib = fields[0], fields[-1] if len(fields) > 1 else "512"
        uuid = fields[1] if len(fields) == 3 else "GPU-fake-0"
        print(f"{pid}, {uuid}, {mib}" if with_uuid else f"{pid}, {mib}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
