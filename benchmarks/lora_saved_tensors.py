"""What autograd keeps per token per decoder layer, by the tensors' last dimension and dtype: a census with
saved-tensor hooks over one forward of a random 2-layer SmolLM2-shaped model (h 576, f 1536, 3 KV heads), LoRA r=16
on all Linear layers or full fine-tuning, float32 or bfloat16 weights, no autocast. Parameters are not counted; each
storage once. Compared with the plan's activation formula (grpo_cli/plan/phase_terms.py) before its LoRA kept-input
term.

    python benchmarks/lora_saved_tensors.py fp32 lora     # one line per (last dim, dtype); see lora_saved_tensors.txt
"""

import sys
from collections import Counter
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory import ARCHS  # noqa: E402  (the benchmark matrix's SmolLM2 shape)

dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[sys.argv[1]]
method = sys.argv[2]
L = 2
shape = dict(ARCHS["llama"], num_hidden_layers=L, vocab_size=1000)
h, f = shape["hidden_size"], shape["intermediate_size"]
cfg = AutoConfig.for_model(**shape)
torch.manual_seed(0)
model = LlamaForCausalLM(cfg).to(dtype)
model.config._attn_implementation = "sdpa"
if method == "lora":
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear"))
model.train()
B, S = 4, 128
ids = torch.randint(0, 1000, (B, S))
mask = torch.ones(B, S, dtype=torch.long)
mask[0, :20] = 0  # left padding in one row
params = {p.data_ptr() for p in model.parameters()}
seen = {}


def pack(t):
    ptr = t.untyped_storage().data_ptr()
    if ptr not in params and ptr not in seen:
        seen[ptr] = (tuple(t.shape), t.dtype, t.untyped_storage().nbytes())
    return t


def unpack(t):
    return t


with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
    out = model(input_ids=ids, attention_mask=mask).logits

total = sum(v[2] for v in seen.values())
by = Counter()
for shape, dt, n in seen.values():
    by[(shape[-1] if shape else 0, str(dt).replace("torch.", ""))] += n
T = B * S
print(
    sys.argv[1],
    method,
    f"total saved {total / 1e6:.1f} MB; per token-layer (all / T / L, head included): {total / T / L / 1e3:.1f} KB",
)
for (last, dt), n in sorted(by.items(), key=lambda x: -x[1]):
    print(f"  last dim {last:>5} {dt:<9} {n / T / L / 1e3:8.2f} KB/token-layer")
w = 4 if dtype == torch.float32 else 2
print("  formula:", ((5.5 * h + 2 * f + 192) * w + 2 * h * 4) / 1e3, "KB/token-layer")
