"""A GRPO configuration written as a plain TRL script, the obvious way (the baseline for `grpo train`'s overhead).

Defaults are recipes/demo.yaml's settings; the options change what the GPU harness compares.

    python benchmarks/plain_trl.py MODEL_DIR STEPS OUTPUT_DIR [--dtype bfloat16] [--generations 8] [--completion 256]
        [--batch 16] [--liger] [--checkpointing] [--mixed trl-default|bf16|no]

--mixed: `trl-default` leaves bf16 unset, as a script written the obvious way would, so TRL's default (bf16=True,
autocast whatever the hardware) applies; without it, bf16 follows --dtype (float32 weights train in float32).
"""

import argparse
import json

import torch
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from rewards.gsm8k import LengthTarget, correctness
from rewards.gsm8k_task import generate_problems, gsm8k_gold

parser = argparse.ArgumentParser()
parser.add_argument("model_dir")
parser.add_argument("steps", type=int)
parser.add_argument("output_dir")
parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
parser.add_argument("--generations", type=int, default=8)
parser.add_argument("--completion", type=int, default=32)
parser.add_argument("--batch", type=int, default=16)
parser.add_argument("--liger", action="store_true")
parser.add_argument("--checkpointing", action="store_true")
parser.add_argument("--mixed", choices=["trl-default", "bf16", "no"])
args = parser.parse_args()

system = "Answer in one short sentence that ends with the final number."
rows = generate_problems(2000, seed=42)
dataset = Dataset.from_list(
    [
        {
            "prompt": [{"role": "system", "content": system}, {"role": "user", "content": r["question"]}],
            "answer": gsm8k_gold(r["answer"]),
        }
        for r in rows
    ]
)
tokenizer = AutoTokenizer.from_pretrained(args.model_dir, padding_side="left")
model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=getattr(torch, args.dtype))
if args.mixed == "trl-default":
    precision = {}
elif args.mixed:
    precision = {"bf16": args.mixed == "bf16"}
else:
    precision = {"bf16": args.dtype == "bfloat16"}
config = GRPOConfig(
    output_dir=args.output_dir,
    use_cpu=not torch.cuda.is_available(),
    **precision,
    gradient_checkpointing=args.checkpointing,
    num_generations=args.generations,
    max_completion_length=args.completion,
    temperature=1.0,
    loss_type="dapo",
    learning_rate=3e-4,
    lr_scheduler_type="constant",
    per_device_train_batch_size=args.batch,
    max_steps=args.steps,
    logging_steps=1,
    save_strategy="no",
    seed=42,
    report_to="none",
    reward_weights=[1.0, 0.5],
    use_liger_kernel=args.liger,
    # Full-length completions: every step does the same work whatever is sampled (see train_overhead.py).
    generation_kwargs={"min_new_tokens": args.completion},
)
trainer = GRPOTrainer(
    model=model,
    reward_funcs=[correctness, LengthTarget(target=16)],
    args=config,
    train_dataset=dataset,
    processing_class=tokenizer,
    peft_config=LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"),
)
trainer.train()
with open(f"{args.output_dir}/log_history.json", "w") as fh:
    json.dump(trainer.state.log_history, fh)
