#!/usr/bin/env bash
# The accelerator checks (MEASUREMENTS.md §7), as one script for a lent GPU machine.
#
#   OUT=/some/dir bash experiments/speed/gpu_checks.sh [env bench main tests prof bench25 grid]
#
# Stages may run side by side (two invocations on one machine). The copy of the checkout
# there carries the .git of the session's start, not of its last commit: set
# MONOLOC_CODE_COMMIT=$(git rev-parse HEAD) here (and MONOLOC_CODE_DIRTY=0 for a clean
# tree) so that the grid's unit JSONs record the code that ran.
# Expects jax with CUDA, flax, optax and orbax installed; wheels of the other
# dependencies (ml_collections, editdistance, tensorboardX) in .whl/ if missing.
# Writes logs and figures under $OUT. Each stage has its own time cap.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:?set OUT}
STAGES=${*:-env bench main tests prof bench25}
# The grid stage's grids, runs ('' = all) and seeds (one program per run:
# --seeds_per_program): by default the protocol's grids (results/NOTES.md), whose units
# the committed results/ does not hold yet.
GRID=${GRID:-table4_authors,table6_authors,table2_authors}
GRID_RUNS=${GRID_RUNS:-}
GRID_SEEDS=${GRID_SEEDS:-0,1,2}
# GRID_WORKERS processes share the GPU, GRID_RUNS dealt out among them round-robin (a
# decoder step is a few latency-bound kernels, so one process leaves the GPU mostly idle).
GRID_WORKERS=${GRID_WORKERS:-1}
# The device gets no ../shared. Lookup and Reverse Lookup units read the paper's files only
# if the caller carries them under GRID_DATA (here: `ln -s ../shared .shared`, ignored in
# .git/info/exclude, and carry `.shared/data/lookup`); without them reproduce.py generates
# the reference tables (data_seed 123: the same tables t1..t8, other sampled rows), and the
# units record that as their data.
GRID_DATA=${GRID_DATA:-.shared/data}
TEST_WORKERS=${TEST_WORKERS:-12}
# Several processes share the one GPU: none may take most of its memory up front.
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2 XLA_PYTHON_CLIENT_PREALLOCATE=false
if [ -d .whl ] && ! python3 -c 'import ml_collections, editdistance, tensorboardX' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
BENCH='from monoloc_jax.benchmark import run; run()'
TRAIN='from monoloc_jax.cli import run; run()'
stamp() { echo "=== $(date +%T) $*"; }
# Every stage's cap is cut to what is left of ${BUDGET_S:-520} s from the start.
END=$(( $(date +%s) + ${BUDGET_S:-520} ))
cap() { local left=$(( END - $(date +%s) - 5 )); echo $(( left < $1 ? (left > 1 ? left : 1) : $1 )); }

bench() {
  stamp bench "$@"
  timeout "$(cap 90)" python3 -c "$BENCH" --task=recopy \
    --model=onestep --train_size=3200 --decode_size=1024 --peak_gflops=67000 "$@" \
    --out=/tmp/bench.json && tr -d '\n ' < /tmp/bench.json >> "$OUT/bench.jsonl" \
    && echo >> "$OUT/bench.jsonl"
}

for stage in $STAGES; do
case $stage in
env)
  stamp env
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c 'import sys, jax, jaxlib, flax, optax, numpy, orbax.checkpoint as oc
from importlib.metadata import version as v
print(sys.version.split()[0], "jax", jax.__version__, "jaxlib", jaxlib.__version__,
      "flax", flax.__version__, "optax", optax.__version__, "orbax", v("orbax-checkpoint"),
      "numpy", numpy.__version__, jax.devices(), jax.default_backend())' ;;
bench)
  # Training samples/s for 1 seed and N seeds (vmap / map), both decoder backward paths,
  # greedy decoding of test_100, compile time, peak GPU memory. ReCopy / OneStepAttn.
  for args in "--seed_strategy=vmap --decoder_backward=autodiff --vmapped_seeds=5" \
              "--seed_strategy=map --decoder_backward=autodiff --vmapped_seeds=5" \
              "--seed_strategy=vmap --decoder_backward=custom --vmapped_seeds=5"; do
    bench $args
  done ;;
bench25)
  for args in "--seed_strategy=vmap --decoder_backward=autodiff --vmapped_seeds=25" \
              "--seed_strategy=map --decoder_backward=autodiff --vmapped_seeds=25"; do
    bench $args
  done ;;

main)
  # README command 1's job.
  stamp main
  rm -rf /tmp/quick
  ( time timeout "$(cap 180)" python3 -c "$TRAIN" --config=quick --workdir=/tmp/quick ) 2>&1 \
    | tee "$OUT/main.txt" | tail -n 25 ;;
prof)
  stamp prof
  rm -rf /tmp/prof
  timeout "$(cap 90)" python3 experiments/speed/accelerator_profile.py /tmp/prof onestep
  tar czf "$OUT/prof.tgz" -C /tmp/prof . ;;
tests)
  # The model, training, sharding and inference tests on the GPU.
  stamp tests
  # SIGINT at the cap: pytest still prints its summary of the failures so far.
  JAX_PLATFORMS=cuda timeout -s INT -k 15 "$(cap ${TESTS_CAP:-300})" \
    python3 -m pytest -q -p no:cacheprovider -n "$TEST_WORKERS" -rf --tb=line --durations=20 --junitxml="$OUT/tests.xml" tests/models_test.py tests/rnn_test.py \
    tests/attention_test.py tests/tapped_scan_test.py tests/dtype_test.py tests/train_test.py \
    tests/sharding_test.py tests/predict_test.py tests/partial_evaluation_test.py \
    tests/transformer_test.py tests/workdir_test.py tests/fidelity_test.py \
    > "$OUT/tests.txt" 2>&1
  tail -n 40 "$OUT/tests.txt" ;;
grid)
  # Real grid units on the GPU, each run's seeds in one vmapped program. The carried
  # results/ says which units are done (they are skipped); the unit JSONs written here
  # (backend recorded) come back as grid_results.tgz, to unpack into results/.
  stamp grid "$GRID" "$GRID_RUNS" "$GRID_SEEDS" "workers $GRID_WORKERS"
  rm -rf /tmp/gridresults && cp -r results /tmp/gridresults && touch /tmp/gridstart
  data=()
  if [ -d "$GRID_DATA/lookup/forward" ]; then data+=(--lookup_data_dir="$GRID_DATA/lookup")
  else echo "no $GRID_DATA/lookup: Lookup units train on generated tables (data_seed 123)"; fi
  [ -d "$GRID_DATA/scan/length_split" ] && data+=(--scan_data_dir="$GRID_DATA/scan/length_split")
  IFS=, read -ra runs <<< "$GRID_RUNS"
  for (( w = 0; w < GRID_WORKERS; w++ )); do
    mine=""
    for (( i = w; i < ${#runs[@]}; i += GRID_WORKERS )); do mine+="${mine:+,}${runs[i]}"; done
    [ "$GRID_WORKERS" -gt 1 ] && [ -z "$mine" ] && continue
    timeout -s INT "$(cap ${GRID_CAP:-480})" python3 experiments/reproduce.py --grid="$GRID" \
      --runs="$mine" --seeds="$GRID_SEEDS" --seeds_per_program=5 "${data[@]}" \
      --workdir=/tmp/gridruns --results_dir=/tmp/gridresults > "/tmp/grid$w.log" 2>&1 &
  done
  wait
  for (( w = 0; w < GRID_WORKERS; w++ )); do
    [ -f "/tmp/grid$w.log" ] || continue
    echo "--- worker $w"; grep -v "^epoch" "/tmp/grid$w.log" | tail -n 12
    grep "^epoch" "/tmp/grid$w.log" | tail -n 3
  done | tee "$OUT/grid.txt"
  (cd /tmp/gridresults && find . -name 'seed*.json' -newer /tmp/gridstart -print0 \
     | tar czf "$OUT/grid_results.tgz" --null -T -)
  # A program the cap cut (no results.json yet) comes back as its workdir, one archive
  # per program (at most 16 MiB each), to resume elsewhere: unpack into a workdir W and
  # rerun reproduce.py with the same --runs, --seeds and --seeds_per_program, --workdir=W.
  k=0
  while IFS= read -r -d '' dir; do
    [ -f "$dir/results.json" ] && continue
    tar czf "$OUT/grid_partial$k.tgz" -C /tmp/gridruns "${dir#/tmp/gridruns/}"
    k=$(( k + 1 ))
  done < <(find /tmp/gridruns -mindepth 4 -maxdepth 4 -type d -name 'seed*' -print0 2>/dev/null) ;;
esac
done
stamp done
