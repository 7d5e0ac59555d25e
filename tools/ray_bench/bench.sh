#!/bin/bash
# usage: bash tools/ray_bench/bench.sh ROUND  (from the checkout; TP, default /tmp/tp, gets
# the stores and outputs). Per round: the overhead matrix and cpu-quick's r06/r16 cells through the local
# pool and through Ray on a new local cluster, then through Ray on a cluster already up (cluster.py).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
TP=${TP:-/tmp/tp}
mkdir -p "$TP"
R=$1
run() {  # name, args...
  local name=$1; shift
  rm -rf $TP/s-$name-$R
  local t0=$(date +%s.%N) l0=$(cut -d' ' -f1 /proc/loadavg)
  .venv/bin/python -m harness matrix "$@" --store $TP/s-$name-$R --no-live > $TP/o-$name-$R.txt 2>$TP/e-$name-$R.txt
  local rc=$? t1=$(date +%s.%N) l1=$(cut -d' ' -f1 /proc/loadavg)
  echo "$name round $R rc=$rc wall=$(echo "$t1 - $t0" | bc) load=$l0..$l1 :: $(head -1 $TP/o-$name-$R.txt)"
}
run ovh-local --preset ray-overhead
run ovh-rayfresh --preset ray-overhead --backend ray
run rep-local --preset cpu-quick --cells 'r06*,r16*'
run rep-rayfresh --preset cpu-quick --cells 'r06*,r16*' --backend ray
.venv/bin/python $HERE/cluster.py > $TP/cluster-$R.txt 2>&1 &
CL=$!
for i in $(seq 120); do [ -s $TP/cluster-$R.txt ] && break; sleep 1; done
run ovh-rayup --preset ray-overhead --backend ray --address auto
run rep-rayup --preset cpu-quick --cells 'r06*,r16*' --backend ray --address auto
kill -TERM $CL; wait $CL
