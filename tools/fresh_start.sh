#!/bin/bash
# README's GPU command as a user runs it on a GPU host, from the repository root there:
#   bash tools/fresh_start.sh [SECONDS]
# Run it first on a fresh host (nothing compiled, no corpus cached): `python3 -m dflash train
# --preset gpu-default` runs twice, `fresh` then `cached` (the same again, its caches now warm),
# then `transformers` (the same with `--set target.impl=transformers`, the target the harness's
# gpu-default workloads build: its import's price on this host), each alone on the GPU with
# SECONDS (240) to finish. Each run's stdout and stderr (with its
# closing `timeline:` line) go to startup-LABEL.out/.err, packed into $OUT/startup.tgz (a host
# returns few files) beside $OUT/startup.txt, the timelines. A run still going at its deadline gets
# a py-spy dump of its threads (startup-LABEL-dump.txt) before it is stopped: a stall is data.
# py-spy comes from a wheel under .whl/ (docs/operations.md).
set -u
limit=${1:-240}; S=/tmp/startup; rm -rf $S; mkdir -p $S
exec > >(tee -a "$OUT/startup.txt") 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
  && export PATH=/tmp/site/bin:$PATH
export PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])"
for label in fresh cached transformers; do
  rm -rf runs/gpu-default   # the preset's output folder: each run starts at step 0
  impl=(); [ $label = transformers ] && impl=(--set target.impl=transformers)
  t0=$EPOCHREALTIME
  python3 -m dflash train --preset gpu-default "${impl[@]}" > "$S/startup-$label.out" 2> "$S/startup-$label.err" &
  pid=$!
  while kill -0 $pid 2>/dev/null && (( ${EPOCHREALTIME%.*} - ${t0%.*} < limit )); do sleep 0.5; done
  if kill -0 $pid 2>/dev/null; then
    py-spy dump --pid $pid > "$S/startup-$label-dump.txt" 2>&1
    kill -TERM $pid; sleep 15; kill -KILL $pid 2>/dev/null
  fi
  wait $pid; rc=$?
  wall=$(python3 -c "print(f'{$EPOCHREALTIME - $t0:.1f}')")
  echo "startup $label rc=$rc wall ${wall}s: $(grep -h '^timeline:' "$S/startup-$label.err")"
done
tar czf "$OUT/startup.tgz" -C /tmp startup
