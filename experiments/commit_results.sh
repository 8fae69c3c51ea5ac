#!/usr/bin/env bash
# Commits the finished grid units and the regenerated REPRODUCTION.md as one snapshot.
#
#   bash experiments/commit_results.sh "Reproduction: ..."     # from anywhere in the checkout
#
# The background drivers (background_drivers.sh) write unit JSONs at any moment. A unit
# that lands between regenerating the report and `git add` would be committed without
# being in the committed report, and tests/reproduce_test.py::test_committed_report_is_current
# fails on that commit (it happened twice on 2026-11-26). So every grid worker is paused
# (SIGSTOP) from the regeneration to the commit and resumed after (SIGCONT), even on error.
set -euo pipefail
cd "$(dirname "$0")/.."
MESSAGE=${1:?usage: bash experiments/commit_results.sh "commit message"}
PIDS=$(pgrep -f "experiments/reproduce.py|experiments/authors_code/run.py" || true)
resume() { if [ -n "$PIDS" ]; then kill -CONT $PIDS 2>/dev/null || true; fi; }
trap resume EXIT
if [ -n "$PIDS" ]; then kill -STOP $PIDS; fi
.venv/bin/python experiments/report.py > /dev/null
git add results REPRODUCTION.md
git commit -q -m "$MESSAGE"
git log --oneline -1
