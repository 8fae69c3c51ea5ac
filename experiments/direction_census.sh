#!/usr/bin/env bash
# Which reading direction each seed commits to, under length-bucketed and random batches.
#
#   bash experiments/direction_census.sh TASK VARIANT [SEEDS=8] [EPOCHS=6] [OUT=results/direction_census]
#
# Trains SEEDS seeds (one program) of VARIANT on TASK with the grid's protocol
# (experiments/configs/reproduce.py) for EPOCHS epochs, once with length-bucketed batches
# (the library's default) and once with random batches (the authors'), everything else
# equal, tests at lengths 15 and 30, and writes experiments/location_trace.py's table
# (per seed: accuracy, the direction gate a_dir, step and mu) to
# OUT/TASK.VARIANT.bucket_batches_{True,False}.txt. Workdirs go to ${WORKDIR:-/tmp}/census_*.
# results/NOTES.md ("Why the ablations fail") reads these tables.
set -euo pipefail
task=$1; variant=$2; seeds=${3:-8}; epochs=${4:-6}; out=${5:-results/direction_census}
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out"
for bucket in True False; do
  work="${WORKDIR:-/tmp}/census_${task}.${variant}.bucket${bucket}"
  monoloc-train --config="$here/configs/reproduce.py" --task="$task" --model="$variant" \
      --seeds="$seeds" --config.max_epochs="$epochs" --config.bucket_batches="$bucket" \
      --config.test_splits=test_15,test_30 --workdir="$work"
  python "$here/location_trace.py" --workdir="$work" --size=200 2>/dev/null \
      > "$out/$task.$variant.bucket_batches_$bucket.txt"
done
