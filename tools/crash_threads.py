"""Where in the run each native crash of the H200 stores fell, and how many threads were left.

    python -m tools.crash_threads [STORE ...]   (default: the gpu-* stores)

For every trial whose failure family is segv or segv-gc: the trainer's last progress line (step
N/M), the threads in faulthandler's dump at the crash and whether any stood in dflash/prefetch.py.
The fullest seed-topology dump lists 16 (2 prefetch, 5 target and 3 drafter threads, main,
tqdm's monitor and 4 without Python frames); fewer means threads had exited before the crash,
which the C-stash double free at thread exit predicts (repro r22).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from harness.diagnosis.families import family
from harness.stores.store import Store
from harness.trial.folder import OUTPUT

DUMP = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):$", re.M)
PROGRESS = re.compile(r"(\d+)/(\d+) \[")
# The checkout's stores, found from this file so that the default does not depend on the folder
# the command runs in.
RESULTS = Path(__file__).resolve().parents[1] / "results"


def main(argv: list[str]) -> int:
    stores = [Path(a) for a in argv] or sorted(RESULTS.glob("gpu-*/"))
    missing = [s for s in stores if not (s / "trials.jsonl").is_file()]
    if missing:
        print(f"error: no result store at {missing[0]}", file=sys.stderr)
        return 2
    print("| trial | stash | progress | threads in dump | a prefetch frame |")
    print("|---|---|---|---|---|")
    for store in stores:
        held = Store(store)
        for r in held.load():
            if family(r.signature_summary) not in ("segv", "segv-gc") or not r.artefacts:
                continue
            # the store's own copy, folder or packed (harness pack); the recorded path is the device's
            out = (held.artefacts_of(r) / OUTPUT).read_text(errors="replace")
            starts = [m.start() for m in DUMP.finditer(out)]
            blocks = [out[a:b] for a, b in zip(starts, [*starts[1:], len(out)])]
            prog = PROGRESS.findall(out)
            stash = "yes" if "cstash-tls-init" in (r.fixes or ()) else "no"
            print(
                f"| `{r.trial_id}` | {stash} | {'/'.join(prog[-1]) if prog else '-'} | {len(blocks)} | "
                f"{'yes' if any('dflash/prefetch.py' in b for b in blocks) else 'no'} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
