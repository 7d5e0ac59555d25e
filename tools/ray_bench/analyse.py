"""Per store of bench.sh: trials per minute over the pool's time, and the slot-seconds per trial its
recorded durations leave uncovered (2 in flight). Reads TP (default /tmp/tp)."""

import glob
import json
import os
import re
import statistics

TP = os.environ.get("TP", "/tmp/tp")
rows = []
for o in sorted(glob.glob(f"{TP}/o-*.txt")):
    name = os.path.basename(o)[2:-4]
    line = open(o).readline()
    m = re.search(r"ran (\d+) trials in (?:(\d+)m)?(\d+)s", line)
    if not m:
        continue
    n, mins, secs = int(m[1]), int(m[2] or 0), int(m[3])
    el = mins * 60 + secs
    recs = [json.loads(ln) for ln in open(f"{TP}/s-{name}/trials.jsonl")]
    dur = sum(r["duration_s"] for r in recs)
    print(
        f"{name:18s} n={n:3d} pool={el:4d}s  {n / el * 60:6.1f} trials/min  sum(duration)={dur:6.1f}s  overhead/trial={(el * 2 - dur) / n:5.2f}s  median dur={statistics.median(r['duration_s'] for r in recs):.2f}s"
    )
