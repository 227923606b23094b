# Sourced by the benchmarks that follow README.md as a new user would: a fresh clone of this repository in a
# temporary folder (removed on exit), a fresh virtual environment activated in it, and an empty model cache.
# Sets $root (this repository) and $work (the temporary folder); the current directory is the clone.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone -q "$root" "$work/grpo"
cd "$work/grpo"
python3 -m venv .venv
. .venv/bin/activate
export GRPO_CACHE="$work/cache"  # the first-time .gguf conversion counts too
unset PYTHONDONTWRITEBYTECODE  # a new user's shell: Python keeps the bytecode it compiles on first import
