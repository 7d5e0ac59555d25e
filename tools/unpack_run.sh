#!/bin/bash
# Bring one H200 run's results (tools/h200_run.sh) into the checkout, from the repository root:
#   bash tools/unpack_run.sh FOLDER RUN_NUMBER
# FOLDER is the folder holding the files the run left in $OUT (stores.tgz, log.txt).
# Every run returns its whole copy of each results/gpu-* store. A copy is merged into the
# checkout's store (`python -m harness merge`), never unpacked over it: a run started before the
# previous run was unpacked holds trial ids that run also handed out, and unpacking one over the
# other loses records (docs/log/2026-11-30-store-merge.md). The log's `dflash
# bench` records (and a price phase's price.jsonl) go to results/h200-campaign/benches.jsonl
# (harness.analysis.bench_records), the log becomes
# results/h200-campaign/run<N>-log.txt, and REPORT.md is regenerated. Bad input: one line, exit 2,
# nothing written. Merges repeat safely, so a run stopped half-way is completed by running it again.
set -euo pipefail
[ $# = 2 ] || { echo "error: usage: bash tools/unpack_run.sh FOLDER RUN_NUMBER" >&2; exit 2; }
src=$1 n=$2
# A host returns at most 8 files: a run that wrote more beside the script's may come back without
# stores.tgz. Its log and price records are still a run (its stores are then the checkout's).
[ -f "$src/log.txt" ] && { [ -f "$src/stores.tgz" ] || [ -f "$src/price.jsonl" ]; } \
  || { echo "error: $src has no log.txt with stores.tgz or price.jsonl" >&2; exit 2; }
[[ $n =~ ^[0-9]+$ ]] || { echo "error: the run number must be a whole number, not '$n'" >&2; exit 2; }
log=results/h200-campaign/run$n-log.txt
[ -e "$log" ] && { echo "error: $log exists: run $n is unpacked already" >&2; exit 2; }
py=${PYTHON:-python3}; [ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ] && py=.venv/bin/python
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
[ -f "$src/stores.tgz" ] && { tar xzf "$src/stores.tgz" -C "$tmp" || { echo "error: $src/stores.tgz does not unpack" >&2; exit 2; }; }
packs=()
for store in "$tmp"/results/*/; do
  [ -f "$store/trials.jsonl" ] || continue
  "$py" -m harness merge "$store" --into "results/$(basename "$store")"
  # a store whose copy held no whole record is not created by the merge: nothing to pack there
  [ -f "results/$(basename "$store")/trials.jsonl" ] && packs+=(--store "results/$(basename "$store")")
done
# The new trials' folders, one zip each (harness pack): the checkout travels to the GPU host whole,
# under 64 MiB, and thousands of small files fill it.
[ ${#packs[@]} = 0 ] || "$py" -m harness pack "${packs[@]}"
# A `price` phase's records (harness price) come back as price.jsonl, without a run number.
rec=(); [ -f "$src/price.jsonl" ] && rec=(--records "$src/price.jsonl")
"$py" -m harness benches "$src/log.txt" "$n" --into results/h200-campaign/benches.jsonl "${rec[@]}"
mkdir -p "$(dirname "$log")"
cp "$src/log.txt" "$log"
"$py" -m harness report
# What the next run ships, said here where it can still be packed or ignored rather than by a
# refused run: the GPU host takes at most 64 MiB of checkout (tracked and untracked, unignored files;
# counted on disk, it seems: 51 MB of files in 4-KiB blocks, 77 MiB on disk, were refused).
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  kib=$(git ls-files -z --cached --others --exclude-standard | du -c -k --files0-from=- 2>/dev/null | tail -1 | cut -f1 || true)
  echo "the checkout a GPU-host run ships: about $(( ${kib:-0} / 1024 )) MiB on disk of the 64 MiB limit (paths copied beside it, such as .whl, come on top)"
fi
