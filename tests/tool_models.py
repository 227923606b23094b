"""A tiny offline model that calls tools: TRL's Qwen2.5 chat template (so TRL parses its `<tool_call>` blocks), and
supervised steps on conversations in which questions about some people are answered through a calculator call and
the others directly. It calls the tool on some problems and answers others at once, each in a well-formed way."""

from __future__ import annotations

from pathlib import Path

SYSTEM = "Answer briefly."
CALL_TEXT = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2 + 3"}}\n</tool_call>'
ANSWER_TEXT = "#### 5"
DIRECT_TEXT = "The answer is 7."


def _tokenizer(directory: Path, rendered: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen2_5_chat_template

    from rewards.gsm8k_task import generate_problems

    corpus = [row["question"] + "\n" + row["answer"] for row in generate_problems(200, seed=1)] + rendered * 3
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=2000,
            special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", padding_side="left"
    )
    fast.chat_template = qwen2_5_chat_template
    fast.save_pretrained(directory)
    return fast


# Questions about these people are answered through the calculator, the others directly: a rule a two-layer model
# learns from the first word, so under greedy decoding it calls on some problems and not on others, every time.
CALLERS = ("Ava", "Chloe", "Elena", "Farid", "Grace", "Hiro")


def conversations(questions: list[str]) -> list[list[dict]]:
    """What the model is taught: a call and an answer from its result (questions about CALLERS), or a direct answer."""
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "calculator", "arguments": {"expression": "2 + 3"}}}],
    }
    out = []
    for question in questions:
        head = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
        if not question.startswith(CALLERS):
            out.append(head + [{"role": "assistant", "content": DIRECT_TEXT}])
        else:
            out.append(
                head
                + [
                    call,
                    {"role": "tool", "name": "calculator", "content": "5"},
                    {"role": "assistant", "content": ANSWER_TEXT},
                ]
            )
    return out


def fingerprint() -> str:
    """What the built model depends on: this file, the problems and the calculator it is taught on, and the library
    versions that tokenize, render and train it."""
    import hashlib
    from importlib.metadata import version

    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for source in (Path(__file__), root / "rewards" / "gsm8k_task.py", root / "grpo_cli" / "tools" / "calculator.py"):
        digest.update(source.read_bytes())
    for package in ("torch", "transformers", "tokenizers", "trl"):
        digest.update(f"{package}=={version(package)}".encode())
    return digest.hexdigest()[:16]


# Each step trains on a seeded random half of the conversations (half a step's cost). Every tool test passed at 120
# such steps and three failed at 80; under the AVX2 caps they passed at 160 and ten failed at 120, so other kernels'
# rounding moves the edge: 240 leaves a margin above both.
def build_tool_model(directory: Path, steps: int = 240, batch: int = 32) -> Path:
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM, LlamaConfig

    from grpo_cli.tools.calculator import calculator
    from rewards.gsm8k_task import generate_problems

    directory.mkdir(parents=True, exist_ok=True)
    questions = [row["question"] for row in generate_problems(64, seed=3)]
    chats = conversations(questions)
    probe = _tokenizer(directory, [])  # a first tokenizer only to render the texts the real one is trained on
    rendered = [probe.apply_chat_template(chat, tools=[calculator], tokenize=False) for chat in chats]
    tokenizer = _tokenizer(directory, rendered)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    examples = [_example(tokenizer, chat, calculator) for chat in chats]
    width = max(len(ids) for ids, _ in examples)
    ids = torch.stack([F.pad(i, (0, width - len(i)), value=tokenizer.pad_token_id) for i, _ in examples])
    labels = torch.stack([F.pad(lab, (0, width - len(lab)), value=-100) for _, lab in examples])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    # The causal-LM loss, with the LM head applied only where a label is taught (about 20 of some 270 positions a
    # conversation): the head over every position was most of each step.
    taught = labels[:, 1:] != -100
    order = torch.Generator().manual_seed(0)
    for _ in range(steps):
        pick = torch.randperm(len(ids), generator=order)[:batch]
        hidden = model.model(input_ids=ids[pick]).last_hidden_state[:, :-1][taught[pick]]
        loss = F.cross_entropy(model.lm_head(hidden), labels[:, 1:][pick][taught[pick]])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory)
    return directory


def _example(tokenizer, chat: list[dict], tool):
    """Token ids of the whole conversation and labels that teach only the assistant's turns."""
    import torch

    ids = tokenizer.apply_chat_template(chat, tools=[tool], tokenize=True, return_dict=False)
    labels = [-100] * len(ids)
    for end in range(1, len(chat) + 1):
        if chat[end - 1]["role"] != "assistant":
            continue
        start = len(
            tokenizer.apply_chat_template(
                chat[: end - 1], tools=[tool], tokenize=True, return_dict=False, add_generation_prompt=True
            )
        )
        stop = len(tokenizer.apply_chat_template(chat[:end], tools=[tool], tokenize=True, return_dict=False))
        labels[start:stop] = ids[start:stop]
    return torch.tensor(ids), torch.tensor(labels)
