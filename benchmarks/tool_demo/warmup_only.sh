#!/usr/bin/env bash
# The tool demo's SFT alone: recipes/demo_tools.yaml trained as shipped (seed 42), then its SFT adapter
# (RUN/sft/final, before any GRPO step) evaluated as the demo's trained model was: the recipe's eval section, 200
# held-out products, greedy, with the calculator. Writes benchmarks/tool_demo/warmup_only/ (summary.json,
# predictions.jsonl, settings.json) and the rescored figures in benchmarks/tool_demo/warmup_only.txt. The run
# folder (RUN, a temporary one by default) stays for you to remove; until the evaluation finishes, rerunning with the
# same RUN continues it.
#   RUN=runs/demo_tools bash benchmarks/tool_demo/warmup_only.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
RUN=${RUN:-$(mktemp -d)/demo_tools}
out=benchmarks/tool_demo/warmup_only
if [ ! -d "$RUN/sft/final" ]; then
  /usr/bin/time -f "train %e s, peak RSS %M KiB" -o "$RUN.time" grpo train recipes/demo_tools.yaml "training.output_dir=$RUN"
fi
grpo eval model recipes/demo_tools.yaml --adapter "$RUN/sft/final" --output "$out"
# committed results name no machine's folders: the run as README's commands name it
sed -i "s#$RUN/sft/final#runs/demo_tools/sft/final#" "$out/settings.json" "$out/summary.json"
{
  echo "# bash benchmarks/tool_demo/warmup_only.sh, $(date -u +%F), commit $(git rev-parse --short HEAD), $(nproc) cores"
  echo "# the SFT stage adapter of recipes/demo_tools.yaml (seed 42; SmolLM2-135M-Instruct Q4_1 .gguf, LoRA r16), before GRPO"
  [ -f "$RUN.time" ] && echo "# $(cat "$RUN.time")"
  python benchmarks/tool_rescore.py "$out"
  echo "# against the demo as trained (SFT then 8 GRPO steps, benchmarks/tool_demo/compare/trained), paired:"
  python benchmarks/tool_rescore.py "$out" benchmarks/tool_demo/compare/trained
} > benchmarks/tool_demo/warmup_only.txt 2>&1
cat benchmarks/tool_demo/warmup_only.txt
