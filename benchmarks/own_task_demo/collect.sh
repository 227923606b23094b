#!/bin/bash
# Copy the demo's evaluation folders from a demo_heldout.py runs folder into this one, this machine's paths written
# as the repository's (runs/demo_largest-s<seed> for a run folder, benchmarks/own_task_demo/s<seed> for its
# evaluation; a later seed's comparison names the first seed's base, which it reused):
#   bash benchmarks/own_task_demo/collect.sh RUNS 42 7
set -euo pipefail
RUNS=$1; shift
HERE=benchmarks/own_task_demo
for seed in "$@"; do
  rm -rf "$HERE/s$seed" && cp -r "$RUNS/demo_largest-s$seed/heldout" "$HERE/s$seed"
done
find "$HERE" -path "$HERE/s*" -type f -exec sed -i \
  -e "s#$RUNS/demo_largest-s\([0-9]*\)/heldout#$HERE/s\1#g" \
  -e "s#$RUNS/demo_largest-s\([0-9]*\)#runs/demo_largest-s\1#g" {} +
