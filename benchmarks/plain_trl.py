"""The demo configuration written as a plain TRL script, the obvious way (the baseline for train_overhead.py).

    python benchmarks/plain_trl.py MODEL_DIR STEPS OUTPUT_DIR
"""

import json
import sys

import torch
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from grpo_cli.answers import gsm8k_gold
from grpo_cli.data import generate_problems
from rewards.gsm8k import LengthTarget, correctness

model_dir, steps, output_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
system = "Answer in one short sentence that ends with the final number."
rows = generate_problems(2000, seed=42)
dataset = Dataset.from_list(
    [{"prompt": [{"role": "system", "content": system}, {"role": "user", "content": r["question"]}],
      "answer": gsm8k_gold(r["answer"])} for r in rows]
)
tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
args = GRPOConfig(
    output_dir=output_dir, use_cpu=not torch.cuda.is_available(), bf16=True, gradient_checkpointing=False,
    num_generations=4, max_completion_length=32, temperature=1.0, loss_type="dapo", learning_rate=3e-4,
    lr_scheduler_type="constant", per_device_train_batch_size=8, max_steps=steps, logging_steps=1,
    save_strategy="no", seed=42, report_to="none", reward_weights=[1.0, 0.5],
    # Full-length completions: every step does the same work whatever is sampled (see train_overhead.py).
    generation_kwargs={"min_new_tokens": 32},
)
trainer = GRPOTrainer(
    model=model, reward_funcs=[correctness, LengthTarget(target=16)], args=args, train_dataset=dataset,
    processing_class=tokenizer,
    peft_config=LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"),
)
trainer.train()
with open(f"{output_dir}/log_history.json", "w") as fh:
    json.dump(trainer.state.log_history, fh)
