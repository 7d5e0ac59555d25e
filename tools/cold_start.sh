#!/bin/bash
# How much of a fresh host's start is its cold disk: README's GPU command with the page cache
# dropped before each run (root only), alternately as is (`plain`) and with torch's and the NVIDIA
# wheels' shared libraries read in the background from the moment it starts (`readahead`), ROUNDS
# (2) times each. Run it first on a fresh host: the first run (`host-fresh`) is the cold start a
# fresh host gives, before any drop. From the repository root on a GPU host:
#   bash tools/cold_start.sh [ROUNDS]
# Writes each run's closing `timeline:` line to $OUT/cold-start.txt, then `import torch`'s ten
# slowest modules (python -X importtime, caches warm).
set -u
rounds=${1:-2}
exec > >(tee -a "$OUT/cold-start.txt") 2>&1
site=$(python3 -c "import importlib.util as u; print(u.find_spec('torch').submodule_search_locations[0].rsplit('/', 1)[0])")
libs=("$site/torch/lib" "$site/nvidia")
echo "$(nvidia-smi -L | head -1); uptime $(uptime -p); libraries: $(du -shc "${libs[@]}" 2>/dev/null | tail -1)"

run() {  # LABEL READAHEAD(0|1)
  rm -rf runs/gpu-default
  local t0=$EPOCHREALTIME reader=
  if [ "$2" = 1 ]; then
    (find "${libs[@]}" -name '*.so*' -size +1M -print0 | xargs -0 -P8 -n2 cat > /dev/null
     echo "  read ahead in $(python3 -c "print(f'{$EPOCHREALTIME - $t0:.1f}')")s") &
    reader=$!
  fi
  python3 -m dflash train --preset gpu-default > /tmp/cold.out 2> /tmp/cold.err
  echo "$1 rc=$?: $(grep -h '^timeline:' /tmp/cold.err)"
  [ -n "$reader" ] && wait $reader
}

drop() { sync && echo 3 > /proc/sys/vm/drop_caches; }

run host-fresh 0
if ! drop 2>/dev/null; then echo "cannot drop the page cache here (not root): no cold runs"; exit 0; fi
for k in $(seq "$rounds"); do
  drop; run "cold-readahead-$k" 1
  drop; run "cold-plain-$k" 0
done
python3 -X importtime -c "import torch" 2> /tmp/importtime.txt
echo "import torch, slowest cumulative (us):"; sort -t'|' -k2 -n /tmp/importtime.txt | tail -10
