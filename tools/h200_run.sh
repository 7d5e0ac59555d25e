#!/bin/bash
# One run of the campaign on the H200 host, from the repository root there:
#   bash tools/h200_run.sh SECONDS PHASE...
# Phases run in order:
#   corpora   the synthetic corpora of gpu-default and both campaign presets, by three short eager
#             runs at once (so that a matrix's first trials do not all generate the same corpus);
#             also the gate of default/bench/campaign
#   warm      corpus + compile caches for gpu-default and both campaign presets (also the CUDA
#             smoke test of the trainer); with `warm+repros` the gpu-repros matrix runs beside it
#   repros:S  the gpu-repros matrix for at most S seconds (store results/gpu-repros, resumed)
#   pytest[:S[:N]]  (env PYTEST_K: a -k expression) the GPU race suite through the runner, r22's 2.11 record (tests/race/catalogue.py) and r23's test,
#             for at most S seconds (240) on N pytest-xdist workers (1)
#   gate[:S[:N]]  the GPU gate: the GPU race suite and the corpus's GPU programs raw vs their offered
#             fix, record in results/gpu-gate/<date>.json (tools/gpu_gate.py; run it after any change to
#             harness/trial or harness/runtime, and commit the record)
#   default   `python -m dflash train --preset gpu-default` alone on the GPU (the trainer's GPU smoke run, eager
#             as the preset ships)
#   startup   gpu-default compiled with transformers' target (STARTUP_STEPS, 300, phase-lock+target-hook-taps) three times alone on the GPU: cold
#             (the run's Inductor cache emptied; the shipped corpus), warm (the same cache again) and preloaded
#             (a new, empty cache + the cold run's compile.cache_artifacts file); each run's
#             `timeline:` line in the log, its records in run.tgz
#   profile   gpu-default's start step by step (tools/start_steps.py, both target builds), imports' times and a py-spy
#             profile of one run (run first on a fresh host: a first start)
#   bench     `python -m dflash bench --preset gpu-default --steps 40` alone on the GPU
#   bench-eval  tools/bench_eval.py on gpu-default and gpu-launch-bound: the evaluation's prompts one at
#             a time against one batch
#   bench:PRESET:FIXES[:MODE[:GPUS]]  one campaign cell alone (GPUS: in the seed topology)
#   price     `python -m harness price $PRICE_ARGS` (configurations benched in alternating rounds,
#             paired ratios with intervals) until 45 s before SECONDS; records in $OUT/price.jsonl,
#             stalled benches' thread dumps in run.tgz (x/price-dumps); env PRICE_RESUME=FILE goes on with
#             FILE's last price run (an earlier run's price.jsonl)
#   campaign  the gpu-campaign matrix until 25 s before SECONDS are spent (store resumed)
#   campaign:GLOB[,GLOB]  the same for the matching cells only (`harness matrix --cells`)
#   topology, topology-4, topology-2  the same for gpu-topology (8 GPUs) / gpu-topology-4 (4 GPUs) /
#             gpu-topology-2 (2 GPUs, one target + one drafter thread per GPU)
#   diag:S    the diagnostic matrix, preset gpu-diag (store results/gpu-diag)
#   verify:S  preset gpu-verify (store results/gpu-verify): do the inductor
#             workaround, cublas-handle-init and single-thread-autograd hold (before a campaign)
#   corpora:P,Q  the same for the named presets only
#   spec:FILE[:S]  the matrix of a JSON spec file (its own store), for at most S seconds
#   lift[:S]  (env LIFT_ARGS) `python -m harness lift` on the GPU targets into
#             results/lift-pct-h200-<date>, for at most S seconds (until 25 s before the end);
#             its lift.json also comes back as $OUT/lift.json
#   versions:S  the versions-cpu matrix on this host's torch and CPUs (store
#             results/versions-cpu-torch<version>), env VERSIONS_ARGS (e.g. "--workers 3")
#   bg:PHASE  PHASE in the background, beside the phases after it (their GPU slots add up: keep a
#             bg matrix small); the run waits for it before packing
# Env MATRIX_ARGS: extra `harness matrix` arguments (e.g. "--max-failures 1 --trials 30") for the
# campaign and topology phases; REPROS_ARGS the same for the repros phases, which MATRIX_ARGS do
# not reach (a campaign's stop rule would end a repro cell at its first failure: no rate).
# Caches: the corpora (.cache/dflash) come back as $OUT/corpora.tgz; copy it to .cache/corpora.tgz
# for the next run (with .whl). The inductor cache (160 MB packed) is over the 16 MB a returned
# file may have: each run compiles cold. Logs and stores come back in $OUT/run.tgz and
# $OUT/stores.tgz; bring them in with `bash tools/unpack_run.sh FOLDER N`, which merges each
# store rather than unpacking it over the checkout's. Unpack a run before starting the next
# (about 15 s): a run started from a store without the previous run's trials hands out the same
# trial indices and so reruns the same scheduler seeds (`harness merge` counts them).
set -u
budget=$1; shift; t0=$(date +%s)
left() { echo $(( budget - ($(date +%s) - t0) )); }
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=$PWD/.cache/inductor
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
  && export PATH=/tmp/site/bin:$PATH PYTHONPATH=/tmp/site
[ -f .cache/corpora.tgz ] && tar xzf .cache/corpora.tgz && rm .cache/corpora.tgz
# The launch-bound and gpu-bound corpora the H200 generated once (3 MB, 270 KB packed): a run
# that finds no copied ones starts from them instead of ~200 s of generation. A config
# change changes the corpus digest, and the trainer then generates a fresh one as before.
[ -d .cache/dflash ] || { [ -f results/h200-campaign/corpora.tgz ] && tar xzf results/h200-campaign/corpora.tgz; }
# gpu-default's corpus (2,048 samples, 106 s of generation on a fresh host, 2026-12-03): beside them.
[ -f .cache/dflash/.gpu-default ] || { [ -f results/h200-2026-12-03-startup/corpus-gpu-default.tgz ] \
  && tar xzf results/h200-2026-12-03-startup/corpus-gpu-default.tgz && touch .cache/dflash/.gpu-default; }
X=/tmp/x; mkdir -p $X .cache   # per-run logs, tarred into $OUT/run.tgz (at most 8 files come back)
exec > >(tee -a "$OUT/log.txt") 2>&1
echo "== $(date -u +%FT%TZ) budget $budget phases $*"
nvidia-smi -L; python3 -c "import torch, transformers, sys; print('torch', torch.__version__, 'transformers', transformers.__version__, 'python', sys.version.split()[0])"
py-spy --version; du -sh .cache 2>/dev/null

train() {  # name, args...: one trainer run, its stdout/stderr kept
  local name=$1; shift
  local s=$(date +%s)
  timeout -k 15 -s TERM 240 python3 -m dflash train "$@" > "$X/$name.out" 2> "$X/$name.err"
  local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - s ))s: $(tail -n 1 "$X/$name.out" | cut -c1-700)"
  [ $rc = 0 ] || { grep -v "^train:" "$X/$name.err" | tail -n 25; touch "$X/FAILED-$name"; }
}

matrix() {  # preset (or a spec file), seconds to start trials in[, cap]: SIGTERM `cap` s later or 25 s before the end
  local preset=$1 start=$2 stop=$(( $(left) - 25 )) src="--preset $1"
  [ -f "$preset" ] && { src="--file $preset"; preset=$(basename "$preset" .json); }
  [ $start -gt $(( stop - 30 )) ] && start=$(( stop - 30 ))
  local cap=${3:-0}; [ $cap -gt 0 ] && [ $stop -gt $(( start + cap )) ] && stop=$(( start + cap ))
  [ $start -gt 20 ] || { echo "no time for $preset"; return 0; }
  echo "matrix $preset: start trials for ${start}s, stop at ${stop}s"
  # read -a, not a bare ${MATRIX_ARGS}: a --cells glob must reach the harness unexpanded.
  # A spec file carries its own trials and stop rules: MATRIX_ARGS are for the presets.
  local extra=(); [ -f "$1" ] || read -ra extra <<< "${MATRIX_ARGS:-}"; [ -n "${CELLS:-}" ] && extra+=("--cells=$CELLS")
  # --finish-by: a trial its cell's median would not end before the SIGTERM is not started (it
  # would be killed for no record); 15 s for Python's start and the summary.
  timeout -k 10 -s TERM $stop python3 -m harness matrix $src --max-time $start --finish-by $(( stop - 15 )) \
    --no-live "${extra[@]}" \
    > "$X/matrix-$preset.out" 2> "$X/matrix-$preset.err"
  # The first line is the matrix's summary (ran N, M left and why): the tail alone cuts it off a
  # campaign's table.
  echo "matrix $preset rc=$?"; head -n 1 "$X/matrix-$preset.out"
  grep -v "^\[" "$X/matrix-$preset.err" | tail -n 40; tail -n +2 "$X/matrix-$preset.out" | tail -n 70
}

warm() {  # waits on its own pids: a bare `wait` would also wait for the tee behind `exec >`
  # All at once (16 cores): corpora and compile caches for both campaign presets and gpu-default.
  local pids=() ro="--set compile.mode=reduce-overhead --set train.eval_prompts=0 --set train.export=false"
  for p in launch-bound gpu-bound; do
    train warm-$p --preset gpu-$p --steps 6 $ro --set fixes=cstash-tls-init --out /tmp/w1-$p & pids+=($!)
    train warm-pb-$p --preset gpu-$p --steps 6 $ro --set fixes=cstash-tls-init,persistent-buffers --out /tmp/w2-$p & pids+=($!)
    train warm-nocg-$p --preset gpu-$p --steps 6 --set compile.mode=default --set train.eval_prompts=0 --out /tmp/w3-$p & pids+=($!)
  done
  train warm-default --preset gpu-default --steps 4 --set target.impl=transformers --set compile.mode=default --set train.eval_prompts=0 --out /tmp/w0 & pids+=($!)
  wait "${pids[@]}"
}

run_phase() {
  local phase=$1
  # The mode-default gpu-default warm-up failing means the trainer is broken on this device: no
  # point in the rest. (The reduce-overhead warm-ups may fail by the races under study.)
  case $phase in default|bench|bench:*|campaign|campaign:*) [ -f $X/FAILED-warm-default ] && { echo "skip $phase: warm-default failed"; return 0; } ;; esac
  case $phase in
    corpora|corpora:*) pids=(); ps=default,launch-bound,gpu-bound; [ "$phase" = corpora ] || ps=${phase#corpora:}
             for p in ${ps//,/ }; do
               train corpus-$p --preset gpu-$p --steps 2 --set compile.mode=none --set train.eval_prompts=0 \
                 --set train.export=false --out /tmp/c-$p & pids+=($!); done; wait "${pids[@]}"
             [ -f $X/FAILED-corpus-default ] && touch $X/FAILED-warm-default
             ls $X/FAILED-corpus-* >/dev/null 2>&1 && touch $X/FAILED-warm-default ;;
    warm) warm ;;
    warm+repros:*) warm & w=$!; MATRIX_ARGS=${REPROS_ARGS:-} matrix gpu-repros ${phase#warm+repros:} 150; wait $w ;;
    repros:*) MATRIX_ARGS=${REPROS_ARGS:-} matrix gpu-repros ${phase#repros:} 150 ;;
    # r22's row is a CPU script, but its 2.11 record (catalogue ON_TORCH) is checkable only here.
    # pytest[:S[:N]]: at most S seconds (240), N xdist workers (1); each test runs its trials one
    # after another, so the GPU suite needs minutes and several workers. -v names each test as it
    # ends (`-q` dots do not say which failed), -rfE prints the failures' reasons if pytest gets to
    # its end, and the trials' artefacts (~30 KB each) come back in run.tgz under pytest-tmp/.
    pytest|pytest:*) IFS=: read -r _ ps pn <<< "$phase"; s=$(date +%s); xd=(); [ "${pn:-1}" -gt 1 ] && xd=(-n "$pn")
            # Env PYTEST_K: a -k expression (one test, e.g. a changed row, without the whole suite).
            kx=(); [ -n "${PYTEST_K:-}" ] && kx=(-k "$PYTEST_K")
            timeout -k 15 "${ps:-240}" python3 -m pytest -v -rfE -p no:cacheprovider --basetemp "$X/pytest-tmp" "${xd[@]}" "${kx[@]}" -m "race or cuda" \
              tests/race/test_gpu_catalogue.py tests/race/test_r22_stash_tls_refcount.py tests/test_r23.py tests/shapes/test_shapes.py \
              > "$X/pytest-race-cuda.txt" 2>&1; echo "pytest race+cuda rc=$? $(( $(date +%s) - s ))s"
            tail -n 15 "$X/pytest-race-cuda.txt" ;;
    # gate[:S[:N]]: the GPU gate (tools/gpu_gate.py), within S seconds (560): the GPU race suite and
    # the generated GPU programs (-m "race or cuda", tests/shapes) on N xdist workers (4) beside the corpus's GPU programs, raw against the
    # fix the diagnosis offers (3 shards at once, 2 runs at a time each); the record goes to
    # results/gpu-gate/<date>.json and $OUT/gpu-gate.json. Env GATE_COMMIT: the commit the checkout
    # is (a host's copy has no .git); GATE_RUNS: runs per arm (4); GATE_ONLY: these entries only;
    # GATE_SHARDS: programs at once (3); GATE_PARALLEL: runs at once per program (2); GATE_ALSO:
    # fix sets (space-separated, each comma-separated) run beside raw and the offered fix, measured only.
    # Each program's failing runs and their diagnosis come back in run.tgz (x/gate-runs/<name>/).
    gate|gate:*) IFS=: read -r _ gs gn <<< "$phase"; gs=${gs:-560}; s=$(date +%s)
            export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
            timeout -k 15 $(( gs - 20 )) python3 -m pytest -v -rfE -p no:cacheprovider --basetemp "$X/gate-tmp" -n "${gn:-4}" \
              -m "race or cuda" --junitxml "$X/gate-junit.xml" tests/race/test_gpu_catalogue.py \
              tests/race/test_r22_stash_tls_refcount.py tests/test_r23.py tests/shapes/test_shapes.py > "$X/gate-pytest.txt" 2>&1 & gp=$!
            gc=(); k=0; also=(); for a in ${GATE_ALSO:-}; do also+=(--also "$a"); done
            while read -r names; do [ -n "$names" ] || continue; k=$(( k + 1 ))
              timeout -k 15 $(( gs - 30 )) python3 -m tools.corpus --device cuda --fixes --only "$names" "${also[@]}" \
                --runs "${GATE_RUNS:-4}" -p "${GATE_PARALLEL:-2}" --out "$X/gate-corpus-$k" --keep "$X/gate-runs" > "$X/gate-corpus-$k.txt" 2>&1 & gc+=($!)
            done < <(python3 -m tools.gpu_gate programs --shards "${GATE_SHARDS:-3}" --only "${GATE_ONLY:-}")
            wait $gp "${gc[@]}"; echo "gate pytest+corpus $(( $(date +%s) - s ))s"; tail -n 25 "$X/gate-pytest.txt"
            cat "$X"/gate-corpus-*.txt | grep -v "^$" | tail -n 40
            # Env GATE_WITH: corpus JSON files of the same commit from an earlier call on this host, recorded with these.
            python3 -m tools.gpu_gate record --junit "$X/gate-junit.xml" --corpus "$X"/gate-corpus-*.json ${GATE_WITH:-} \
              --commit "${GATE_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" \
              --out "results/gpu-gate/$(date -u +%F).json"; cp "results/gpu-gate/$(date -u +%F).json" "$OUT/gpu-gate.json" ;;
    default) train gpu-default --preset gpu-default --steps 120 --out /tmp/gd ;;
    # Cold and warm use the run's own Inductor cache (emptied first: the phases after this one
    # start warm from it); env STARTUP_STEPS (300) steps each.
    startup) c=$X/cc-gpu-default.bin; rm -f "$c"
             for label in cold warm preloaded; do
               case $label in cold) d=$TORCHINDUCTOR_CACHE_DIR; rm -rf $d ;; warm) d=$TORCHINDUCTOR_CACHE_DIR ;; preloaded) d=/tmp/ind-s2; rm -rf $d ;; esac
               s=$(date +%s)
               TORCHINDUCTOR_CACHE_DIR=$d timeout -k 15 -s TERM 300 python3 -m dflash train --preset gpu-default \
                 --steps ${STARTUP_STEPS:-300} --set target.impl=transformers --set compile.mode=default --set fixes=phase-lock,target-hook-taps --set compile.cache_artifacts="$c" \
                 --set train.progress=false --out /tmp/st-$label > "$X/startup-$label.out" 2> "$X/startup-$label.err"
               echo "startup $label rc=$? $(( $(date +%s) - s ))s: $(grep -h '^timeline:' "$X/startup-$label.err")"
             done; rm -f "$c" ;;   # the file (~60 MB) is over what a returned file may have
    # Where README's GPU command spends its start on this host: tools/start_steps.py twice (fresh
    # processes), `-X importtime` of the target's imports, and py-spy's raw samples of one
    # gpu-default run reading its corpus from the package as a new user does, all in $X/profile.
    profile) mkdir -p $X/profile; for k in 1 2; do for i in native transformers; do
               python3 -m tools.start_steps --impl $i >> "$X/profile/steps.txt" 2>&1; done; done
             cat "$X/profile/steps.txt"
             python3 -X importtime -c "import torch, dflash.cli; from transformers import LlamaForCausalLM" 2> "$X/profile/importtime.txt"
             timeout -k 10 240 py-spy record -r 200 -f raw -o "$X/profile/prof-train.txt" -- python3 -m dflash train \
               --preset gpu-default --set train.progress=false --set data.cache_dir=/tmp/prof-corpus --out /tmp/prof > "$X/profile/train.out" 2> "$X/profile/train.err"
             echo "profile rc=$?: $(grep -h '^timeline:' "$X/profile/train.err")"; gzip "$X/profile/prof-train.txt" ;;
    # The end-of-run evaluation, prompts one at a time against one batch (tools/bench_eval.py).
    bench-eval) for bp in default launch-bound; do s=$(date +%s)
             timeout -k 15 -s TERM 240 python3 -m tools.bench_eval --preset gpu-$bp > "$X/bench-eval-$bp.out" 2>&1
             echo "bench-eval $bp rc=$? $(( $(date +%s) - s ))s: $(tail -n 1 "$X/bench-eval-$bp.out")"; done ;;
    bench) s=$(date +%s); timeout -k 15 -s TERM 200 python3 -m dflash bench --preset gpu-default --steps 40 > "$X/bench.out" 2> "$X/bench.err"
           echo "bench rc=$? $(( $(date +%s) - s ))s"; cat "$X/bench.out"; grep -v "^train:" "$X/bench.err" | tail -n 8 ;;
    bench:*) # bench:PRESET:FIXES[:MODE[:GPUS]]: one campaign cell alone on the GPU (its GPU busy fraction);
           # GPUS (>= 4) runs it in the seed topology on that many GPUs, as gpu-topology-4's trials
           IFS=: read -r _ bp bf bm bgpu <<< "$phase"; s=$(date +%s); bn=bench-$bp-${bf:-raw}-${bm:-reduce-overhead}${bgpu:+-${bgpu}gpu}
           topo=(); [ -n "$bgpu" ] && mapfile -t topo < <(python3 -c 'import sys
from dflash.topology import seed_topology
for kv in seed_topology(int(sys.argv[1])): print("--set"); print(kv)' "$bgpu")
           timeout -k 15 -s TERM 200 python3 -m dflash bench --preset gpu-$bp --steps 60 --rounds 1 --set fixes=$bf \
             --set compile.mode=${bm:-reduce-overhead} "${topo[@]}" > "$X/$bn.out" 2> "$X/$bn.err"
           # A bench that dies is evidence (harness.analysis.benches reads its failure from what follows the
           # rc line): 40 lines keep a thread's traceback whole, where 8 cut its header off.
           rc=$?; echo "bench $bp $bf rc=$rc $(( $(date +%s) - s ))s"; cat "$X/$bn.out"
           grep -v "^train:" "$X/$bn.err" | tail -n $([ $rc = 0 ] && echo 8 || echo 40) ;;
    price) # Env PRICE_ARGS: `harness price` arguments (preset, rounds, configurations): interleaved
           # benches alone on the GPU, priced by paired per-round ratios; records in $OUT/price.jsonl
           # (unpack_run.sh stamps them with the run number), the table in the log.
           # Env PRICE_RESUME: an earlier run's price.jsonl (carried): its last price run goes on (--resume),
           # the copy comes back whole and unpack_run.sh adds only the new benches. --max-time starts no
           # bench that would not end before the run does; a bench past --timeout-s is dumped into
           # price-dumps/ of run.tgz before it is killed ($OUT takes 8 files: a folder of dumps is more).
           read -ra pa <<< "${PRICE_ARGS:-}"; s=$(date +%s); ra=()
           [ -n "${PRICE_RESUME:-}" ] && { cp "$PRICE_RESUME" "$OUT/price.jsonl"; ra=(--resume); }
           timeout -k 15 -s TERM $(( $(left) - 25 )) python3 -m harness price "${pa[@]}" "${ra[@]}" \
             --max-time $(( $(left) - 45 )) --into "$OUT/price.jsonl" --dumps "$X/price-dumps" \
             > "$X/price.out" 2> "$X/price.err"
           echo "price rc=$? $(( $(date +%s) - s ))s"; cat "$X/price.out"; grep -v "^train:" "$X/price.err" | tail -n 60 ;;
    # Start window: until 70 s before the end (SIGTERM at 25, --finish-by at 40): --finish-by keeps
    # out any trial its cell's median would not end in time, so a wider margin only idles the GPU
    # (docs/log/2026-12-01-finish-by.md). A cell with no stored median can still be cut by the stop.
    campaign) matrix gpu-campaign $(( $(left) - 70 )) ;;
    campaign:*) # campaign:GLOB[,GLOB]: only those cells (harness matrix --cells), same store
           CELLS=${phase#campaign:} matrix gpu-campaign $(( $(left) - 70 )) ;;
    topology|topology-4|topology-2) matrix gpu-$phase $(( $(left) - 70 )) ;;   # the seed topology, on 8 / 4 / 2 H200s
    diag:*) matrix gpu-diag ${phase#diag:} ;;
    versions:*) MATRIX_ARGS=${VERSIONS_ARGS:-} matrix versions-cpu ${phase#versions:} ;;
    lift|lift:*) ls=${phase#lift}; ls=${ls#:}; [ -n "$ls" ] || ls=$(( $(left) - 25 )); s=$(date +%s)
           lo=results/lift-pct-h200-$(date -u +%F); read -ra la <<< "${LIFT_ARGS:-}"
           timeout -k 15 -s TERM "$ls" python3 -m harness lift "${la[@]}" --out "$lo" > "$X/lift.out" 2> "$X/lift.err"
           echo "lift rc=$? $(( $(date +%s) - s ))s"; grep -v "^  " "$X/lift.out" | tail -n 40; tail -n 20 "$X/lift.err"
           [ -f "$lo/lift.json" ] && cp "$lo/lift.json" "$OUT/lift.json" ;;
    verify:*) matrix gpu-verify ${phase#verify:} ;;
    # A spec file's cells are mostly new (diag, verify): no stored median for --finish-by to go
    # by, so the wider margin stays.
    spec:*) IFS=: read -r _ sf ss <<< "$phase"; matrix "$sf" "${ss:-$(( $(left) - 130 ))}" ;;
    *) echo "unknown phase $phase" ;;
  esac
}

bg=()
for phase in "$@"; do
  echo "== phase $phase at $(( $(date +%s) - t0 ))s"
  case $phase in bg:*) run_phase "${phase#bg:}" & bg+=($!) ;; *) run_phase "$phase" ;; esac
done
[ ${#bg[@]} = 0 ] || wait "${bg[@]}"
echo "== phases done at $(( $(date +%s) - t0 ))s"
tar czf "$OUT/run.tgz" -C /tmp x
# Packed trials (harness pack, `<trial>.zip`) are the checkout's own, older than this run: only
# the folders of trials run here come back, which keeps stores.tgz under the 16 MB a file may have.
tar czf "$OUT/stores.tgz" --exclude='*/run/*' --no-wildcards-match-slash --exclude='artefacts/*.zip' \
  $(ls -d results/gpu-*/ results/versions-cpu-torch2.11*/ results/lift-pct-h200-*/ 2>/dev/null)
tar czf "$OUT/corpora.tgz" .cache/dflash 2>/dev/null
ls -la "$OUT"; echo "== done after $(( $(date +%s) - t0 ))s"
