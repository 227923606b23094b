"""Tiny offline models for tests: a BPE tokenizer trained on the fly, and models built from configs."""

from __future__ import annotations

from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tokenizer(directory: Path):
    """A ~400-token byte-level BPE with a ChatML template, trained on generated GSM8K-format text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from rewards.gsm8k_task import generate_problems

    corpus = [row["question"] + "\n" + row["answer"] for row in generate_problems(300, seed=1)]
    corpus += ["<reasoning>\n</reasoning>\n<answer>\n</answer>", "system user assistant"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", padding_side="left"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(directory)
    return fast


def build_model(directory: Path, family: str = "llama", hidden: int = 32, layers: int = 2) -> Path:
    """Random-initialised model saved with its tokenizer. `llama`: tied embeddings; `qwen2`: q/k/v biases."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(directory)
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    if family == "llama":
        config = LlamaConfig(tie_word_embeddings=True, **common)
    elif family == "qwen2":
        config = Qwen2Config(tie_word_embeddings=False, **common)
    else:
        raise ValueError(family)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory)
    return directory
