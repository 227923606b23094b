"""grpo eval's hand-written continuous batching against transformers' own (`generate_batch`), same model and prompts.

Both decode greedily with the same budget on the first N GSM8K test problems (the chat prompts of the GSM8K CPU
recipe). Prints tokens/s of each, the ratio, and how many completions are identical token for token.

    python benchmarks/eval_generation_engines.py [--limit 200] [--batch-size 32] [--max-new-tokens 512]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "gsm8k" / "test.jsonl")
    args = parser.parse_args()

    import torch
    from transformers import GenerationConfig

    from grpo_cli.eval.problems import Problem, chat_prompts
    from grpo_cli.generation.continuous import ContinuousGenerator
    from grpo_cli.models import load_model, load_tokenizer
    from grpo_cli.progress import quiet_libraries
    from grpo_cli.recipe.validation import load_recipe

    quiet_libraries()
    recipe = load_recipe(
        ROOT / "recipes" / "gsm8k" / "smollm2_135m_cpu.yaml", [f"data.source={args.data}"], scope="eval"
    )
    rows = [json.loads(line) for line in args.data.read_text().splitlines()[: args.limit]]
    problems = [Problem(i, r["question"], r["answer"], "") for i, r in enumerate(rows)]
    tokenizer = load_tokenizer(recipe.model)
    prompts = chat_prompts(problems, recipe.data, tokenizer)
    model = load_model(recipe.model, recipe.quantization).eval()
    print(
        f"{len(prompts)} prompts, {recipe.model.dtype}, {torch.get_num_threads()} threads, "
        f"budget {args.max_new_tokens}, batch {args.batch_size}"
    )

    ours: dict[int, list[int]] = {}
    engine = ContinuousGenerator(model, tokenizer, args.max_new_tokens, [], None)
    engine._text = lambda tokens: tokens  # keep the token ids for the comparison
    started = time.perf_counter()
    for batch in engine.generate(prompts, args.batch_size):
        for item in batch:
            ours[item.index] = [t for t in item.text]
    ours_s = time.perf_counter() - started
    ours_tokens = sum(len(t) for t in ours.values())
    print(
        f"hand-written continuous batching: {ours_tokens} tokens in {ours_s:.1f} s = "
        f"{ours_tokens / ours_s:.1f} tokens/s",
        flush=True,
    )

    config = GenerationConfig(
        max_new_tokens=args.max_new_tokens,
        do_sample=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    inputs = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    started = time.perf_counter()
    outputs = model.generate_batch(inputs, generation_config=config, progress_bar=False)
    theirs_s = time.perf_counter() - started
    theirs = {}
    for request_id, out in outputs.items():
        index = int(request_id.rsplit("_", 1)[-1])
        tokens = list(out.generated_tokens)
        theirs[index] = [t for t in tokens if t != tokenizer.eos_token_id]
    theirs_tokens = sum(len(t) for t in theirs.values())

    same = sum(ours[i] == theirs.get(i) for i in ours)
    print(
        f"transformers generate_batch:      {theirs_tokens} tokens in {theirs_s:.1f} s = "
        f"{theirs_tokens / theirs_s:.1f} tokens/s"
    )
    print(f"speed ratio (ours / transformers): {(ours_tokens / ours_s) / (theirs_tokens / theirs_s):.2f}x")
    print(f"identical greedy completions: {same}/{len(ours)}")


if __name__ == "__main__":
    main()
