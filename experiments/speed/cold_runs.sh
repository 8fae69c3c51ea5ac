#!/usr/bin/env bash
# Cold runs of README command 1's job (`--config=quick`), two trees alternated ABBA:
#
#   bash experiments/speed/cold_runs.sh OLD_TREE OLD_PYTHON NEW_TREE NEW_PYTHON [ROUNDS=3]
#
# e.g. `git worktree add --detach ../old 74fd721` with its own virtualenv (README command 1)
# against this checkout. Each run gets a fresh XLA compilation cache and task-data cache
# (MONOLOC_XLA_CACHE, MONOLOC_CACHE_DIR) and a fresh workdir; one line per run: the tree,
# the job's wall_time_s, epoch 1 - epoch 2 (epoch_s) and the test accuracies. Rounds run
# old,new then new,old (the second run of a pair was seen to train up to 17% slower,
# MEASUREMENTS.md §4). Pause other work for it (SIGSTOP), as the log's figures were taken.
set -euo pipefail
OLD=$1 OLD_PY=$2 NEW=$3 NEW_PY=$4 ROUNDS=${5:-3}
one() {  # one TAG TREE PYTHON
  local w; w=$(mktemp -d)
  (cd "$w" && PYTHONPATH="$2" MONOLOC_XLA_CACHE="$w/xla" MONOLOC_CACHE_DIR="$w/data" \
     "$3" -m monoloc_jax.main --config=quick --workdir="$w/run" > "$w/log" 2>&1)
  python3 - "$1" "$w/run" <<'PY'
import json, sys
tag, run = sys.argv[1:]
r = json.load(open(f'{run}/results.json'))
h = [json.loads(line) for line in open(f'{run}/metrics.jsonl')]
gap = h[0]['epoch_s'] - h[1]['epoch_s']
acc = {k: v['accuracy'] for k, v in r['test'].items()}
print(f"{tag} wall_time_s {r['wall_time_s']:.1f} epoch1-epoch2 {gap:.1f} "
      f"epochs {[round(x['epoch_s'], 1) for x in h]} accuracy {acc}", flush=True)
PY
  rm -rf "$w"
}
for ((r = 0; r < ROUNDS; r++)); do
  if ((r % 2 == 0)); then one old "$OLD" "$OLD_PY"; one new "$NEW" "$NEW_PY"
  else one new "$NEW" "$NEW_PY"; one old "$OLD" "$OLD_PY"; fi
done
