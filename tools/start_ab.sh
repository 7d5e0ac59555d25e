#!/bin/bash
# README's GPU command from this checkout (`new`) against other trees of the trainer, cold and
# warm, on one GPU host. From the repository root there, first thing on a fresh host:
#   bash tools/start_ab.sh ROUNDS NAME=DIR [NAME=DIR...]
# DIR: a folder holding another tree's dflash/ and harness/ (git archive COMMIT dflash harness).
# Runs, each alone on the GPU with LIMIT seconds (120) to finish, its stall dumped by py-spy
# (from a wheel under .whl/) before it is stopped:
#   host-fresh      this checkout, the host's first run (nothing read from its disk yet)
#   cold-NAME-K     the page cache dropped before each (root only), ROUNDS of each tree, their
#                   order rotating from round to round
#   warm-NAME-K     the same without the drop
#   FIRST=1         cold runs also start without the trainer's bytecode cache (dflash/bytecode.py):
#                   each is then a host's first run but for the GPU's first use, which only the
#                   host-fresh run pays
#   pyc-cold, pyc-warm  this checkout with torch's, numpy's, pyarrow's and our bytecode compiled
#                   beforehand into a PYTHONPYCACHEPREFIX, as `pip install` leaves a package
#                   (the GPU image ships torch without bytecode and forbids writing it);
#                   PYC=0 leaves them out
# Each run's closing `timeline:` and `tau` go to $OUT/start-ab.txt, then a `disk:` line (torch's
# largest library read with the page cache dropped); each run's stdout and stderr to $OUT/start-ab.tgz.
set -u
rounds=$1; shift; trees=("new=$PWD" "$@"); limit=${LIMIT:-120}; S=/tmp/start-ab; rm -rf $S; mkdir -p $S
exec > >(tee -a "$OUT/start-ab.txt") 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
  && export PATH=/tmp/site/bin:$PATH
export PYTHONUNBUFFERED=1
here=$PWD

run() {  # LABEL TREE [ENV...]: README's GPU command from TREE's dflash/ and harness/
  local label=$1 tree=$2; shift 2
  rm -rf "$tree/runs/gpu-default"
  local t0=$EPOCHREALTIME
  (cd "$tree" && exec env "$@" python3 -m dflash train --preset gpu-default > "$S/$label.out" 2> "$S/$label.err") &
  local pid=$!  # python itself (exec)
  while kill -0 $pid 2>/dev/null && (( ${EPOCHREALTIME%.*} - ${t0%.*} < limit )); do sleep 0.5; done
  if kill -0 $pid 2>/dev/null; then
    py-spy dump --pid $pid > "$S/$label-dump.txt" 2>&1
    kill -TERM $pid; sleep 15; kill -KILL $pid 2>/dev/null
  fi
  wait $pid; local rc=$?
  local tau; tau=$(grep -ho '"tau": [0-9.]*' "$S/$label.out" | tail -1)
  echo "$label rc=$rc wall $(python3 -c "print(f'{$EPOCHREALTIME - $t0:.1f}')")s $tau: $(grep -h '^timeline:' "$S/$label.err")"
}

drop() { sync && echo 3 > /proc/sys/vm/drop_caches; }

each() {  # cold|warm: every tree once a round, the order rotated by one each round
  local k i n=${#trees[@]}
  for k in $(seq "$rounds"); do
    for i in $(seq 0 $((n - 1))); do
      local pair=${trees[$(( (i + k) % n ))]}
      if [ "$1" = cold ]; then
        [ "${FIRST:-0}" = 1 ] && rm -rf "$(python3 -c 'from dflash import bytecode; print(bytecode.default_cache())')"
        drop 2>/dev/null || continue
      fi
      run "$1-${pair%%=*}-$k" "${pair#*=}"
    done
  done
}

echo "$(nvidia-smi -L | head -1); uptime $(uptime -p); $(python3 -c 'import sys; print("python", sys.version.split()[0])')"
run host-fresh "$here"
python3 -c "import torch; print('torch', torch.__version__)"
if ! drop 2>/dev/null; then echo "cannot drop the page cache here (not root): no cold runs"; fi
each cold
each warm
# How fast this host reads a cold disk, which sets most of a first run's imports (2.4-4.8 s on
# fresh H100 hosts of one day): torch's largest library read once with the page cache dropped.
lib=$(python3 -c "import glob, os, torch; print(max(glob.glob(os.path.dirname(torch.__file__) + '/lib/*.so*'), key=os.path.getsize))")
drop 2>/dev/null && echo "disk: $(basename "$lib") read cold: $(dd if="$lib" of=/dev/null bs=16M 2>&1 | tail -1)"
[ "${PYC:-1}" = 1 ] || { tar czf "$OUT/start-ab.tgz" -C /tmp start-ab; exit 0; }
pyc=/tmp/pycache; t0=$EPOCHREALTIME
dirs=$(python3 -c "import os, numpy, pyarrow, torch; print(*(os.path.dirname(m.__file__) for m in (torch, numpy, pyarrow)))")
PYTHONPYCACHEPREFIX=$pyc python3 -m compileall -q -j 16 $dirs dflash harness > /dev/null 2>&1
echo "bytecode compiled in $(python3 -c "print(f'{$EPOCHREALTIME - $t0:.1f}')")s: $(find $pyc -name '*.pyc' | wc -l) files"
drop 2>/dev/null && run pyc-cold "$here" PYTHONPYCACHEPREFIX=$pyc
run pyc-warm "$here" PYTHONPYCACHEPREFIX=$pyc
tar czf "$OUT/start-ab.tgz" -C /tmp start-ab
