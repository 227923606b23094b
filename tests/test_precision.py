"""Mixed precision: `auto` follows the weights, and for float32 weights the hardware; bf16 autocast really trains."""

from __future__ import annotations

import math

import pytest
import torch
from typer.testing import CliRunner

from conftest import ASSETS, write_recipe
from grpo_cli.cli import app
from grpo_cli.recipe.grpo_config import grpo_config_kwargs
from grpo_cli.recipe.precision import cpu_computes_bf16, mixed_precision
from grpo_cli.recipe.validation import load_recipe, with_changes


def test_cpu_bf16_is_read_from_the_cpu_flags(tmp_path):
    zen4, older = tmp_path / "zen4", tmp_path / "older"
    zen4.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni\n")
    older.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_vnni\n")
    assert cpu_computes_bf16(zen4, environ={}) and not cpu_computes_bf16(older, environ={})
    assert not cpu_computes_bf16(tmp_path / "missing", environ={})


@pytest.mark.parametrize(
    "caps, native",
    [
        ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, False),
        ({"ATEN_CPU_CAPABILITY": "avx2"}, False),
        ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"}, False),
        ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, True),
        ({"ONEDNN_MAX_CPU_ISA": "ALL", "ATEN_CPU_CAPABILITY": "avx512"}, True),
    ],
)
def test_an_instruction_set_cap_below_bf16_keeps_float32(tmp_path, caps, native):
    zen4 = tmp_path / "zen4"
    zen4.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni\n")
    assert cpu_computes_bf16(zen4, environ=caps) is native


@pytest.mark.parametrize(
    "dtype, chosen, native, expected",
    [
        ("float32", "auto", True, "bf16"),
        ("float32", "auto", False, "no"),
        ("bfloat16", "auto", False, "bf16"),
        ("float16", "auto", True, "fp16"),
        ("float32", "no", True, "no"),
        ("float32", "bf16", False, "bf16"),
    ],
)
def test_auto_follows_the_weights_then_the_hardware(tmp_path, tiny_llama, dtype, chosen, native, expected):
    recipe = load_recipe(
        write_recipe(tmp_path, tiny_llama), [f"model.dtype={dtype}", f"model.mixed_precision={chosen}"]
    )
    assert mixed_precision(recipe.model, native_bf16=native) == expected
    kwargs = grpo_config_kwargs(recipe, tmp_path, on_cpu=True, mixed=mixed_precision(recipe.model, native))
    # Always explicit: TRL's own default (bf16=True) would emulate bfloat16 on CPUs without it.
    assert (kwargs["bf16"], kwargs["fp16"]) == (expected == "bf16", expected == "fp16")


def test_autocast_that_contradicts_the_weights_is_refused(tmp_path, tiny_llama):
    path = write_recipe(
        tmp_path, tiny_llama, model={"name": str(tiny_llama), "dtype": "bfloat16", "mixed_precision": "fp16"}
    )
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and "model.mixed_precision" in result.output and "bf16" in result.output
    assert "Traceback" not in result.output


@pytest.mark.slow  # real training steps
def test_bf16_autocast_over_float32_weights_trains(tmp_path, tiny_llama):
    """A real TRL step with float32 LoRA weights and bf16 matmuls, with a KL term (the reference forward runs on the
    same base): the adapted layers compute in bfloat16 in the loss's forward, their frozen bases are stored in
    bfloat16, the adapters train in float32, the loss is finite and the adapter moves."""
    from grpo_cli.train.trainer import build_trainer

    rewards = [{"name": f"{ASSETS / 'varied_rewards.py'}:digit_share"}]  # reward variance in every group
    recipe = with_changes(
        load_recipe(write_recipe(tmp_path, tiny_llama, lora={"r": 4, "dropout": 0.0}, rewards=rewards)),
        {"model.mixed_precision": "bf16", "grpo.beta": 0.04},
    )
    recipe.output_dir.mkdir(parents=True)
    trainer, _ = build_trainer(recipe, recipe.output_dir)
    assert trainer.args.bf16
    model = trainer.accelerator.unwrap_model(trainer.model)
    layer = next(m for name, m in model.named_modules() if name.endswith("q_proj.base_layer"))
    seen = []
    layer.register_forward_hook(lambda module, args, out: seen.append((torch.is_grad_enabled(), out.dtype)))
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    trainer.train()
    assert (True, torch.bfloat16) in seen, seen  # the training forward ran its matmuls in bfloat16
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert trainable and all(p.dtype == torch.float32 for p in trainable)  # the adapters train in float32
    assert layer.weight.dtype == torch.bfloat16  # a frozen base, cast once
    assert model.get_input_embeddings().weight.dtype == torch.float32
    optimized = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert optimized == {id(p) for p in trainable}  # the optimizer still holds the model's own parameters
    assert any(h.get("kl", 0) > 0 for h in trainer.state.log_history)  # the reference forward ran
    assert all(math.isfinite(h["loss"]) for h in trainer.state.log_history if "loss" in h)
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters() if p.requires_grad)


def test_frozen_weights_cast_once_give_the_products_autocast_gives():
    """Storing a frozen weight in bfloat16 changes nothing under bf16 autocast: it casts to the same values."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from grpo_cli.train.frozen_weights import frozen_linears

    config = AutoConfig.for_model(
        "llama",
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
    )
    torch.manual_seed(0)
    model = get_peft_model(
        AutoModelForCausalLM.from_config(config), LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False)
    )
    ids = torch.randint(0, 256, (2, 12))

    def logits():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            return model(input_ids=ids).logits

    before = logits()
    layers = frozen_linears(model)
    assert len(layers) == 2 * 7  # q, k, v, o, gate, up, down per layer; not lm_head, not the adapters
    for module in layers:
        module.to(torch.bfloat16)
    assert torch.equal(before, logits())


def test_sampling_casts_the_frozen_output_layer_once_to_the_same_tokens():
    """output_layer_cast_once: the same logits and sampled tokens as autocast casting the weight at every step."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from grpo_cli.train.frozen_weights import output_layer_cast_once

    config = AutoConfig.for_model(
        "llama",
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = get_peft_model(
        AutoModelForCausalLM.from_config(config), LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False)
    )
    ids = torch.randint(0, 256, (2, 12))
    output = model.get_output_embeddings()

    def sample():
        torch.manual_seed(1)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            out = model.generate(
                input_ids=ids,
                do_sample=True,
                max_new_tokens=6,
                min_new_tokens=6,
                output_logits=True,
                return_dict_in_generate=True,
            )
        return out.sequences, torch.stack(out.logits)

    tokens, logits = sample()
    with output_layer_cast_once(model, torch.bfloat16):
        narrow_tokens, narrow_logits = sample()
        assert "forward" in vars(output)  # the one-cast forward is in place while sampling
    assert torch.equal(tokens, narrow_tokens) and torch.equal(logits, narrow_logits)
    assert "forward" not in vars(output) and output.weight.dtype == torch.float32  # nothing left behind


def test_a_bf16_checkpoint_keeps_its_frozen_linears_as_stored(tmp_path, tiny_llama):
    """Loaded for a LoRA run under bf16 autocast, a bfloat16 checkpoint's Linear weights stay as stored and the rest
    is widened: the same values as loading all in float32 and casting the Linears (what `narrow` does)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_cli.models import load_model
    from grpo_cli.train.frozen_weights import frozen_linears

    stored = tmp_path / "bf16-checkpoint"
    AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.bfloat16).save_pretrained(stored)
    AutoTokenizer.from_pretrained(tiny_llama).save_pretrained(stored)
    recipe = load_recipe(write_recipe(tmp_path, stored, lora={"r": 4}), ["model.mixed_precision=bf16"])
    kept = load_model(recipe.model, recipe.quantization, "bfloat16")
    reference = load_model(recipe.model, recipe.quantization).requires_grad_(False)  # as under PEFT: the base is frozen
    for module in frozen_linears(reference):
        module.to(torch.bfloat16)
    assert dict(kept.named_parameters()).keys() == dict(reference.named_parameters()).keys()
    for (name, a), b in zip(kept.named_parameters(), reference.parameters()):
        assert a.dtype == b.dtype and torch.equal(a, b), name
    assert kept.get_input_embeddings().weight.dtype == torch.float32 and kept.config.dtype == torch.float32
    # Widened from plain reads of the file, not through its memory map: every tensor is found there as loaded.
    from grpo_cli.models import _stored_tensors

    entries = _stored_tensors(str(stored), None)
    assert dict(kept.named_parameters()).keys() <= entries.keys()
    from grpo_cli.models import _read_stored

    path, start, entry = entries["model.embed_tokens.weight"]  # read in slices smaller than a row, then whole
    assert torch.equal(
        _read_stored(path, start, entry, torch.bfloat16, torch.float32, chunk_bytes=6),
        kept.get_input_embeddings().weight,
    )
    assert torch.equal(
        _read_stored(path, start, entry, torch.bfloat16, torch.float32), kept.get_input_embeddings().weight
    )
    widened = load_recipe(write_recipe(tmp_path, stored), [])  # full fine-tuning in float32: every tensor widened
    for (name, a), b in zip(
        load_model(widened.model).named_parameters(),
        AutoModelForCausalLM.from_pretrained(stored, dtype=torch.float32).parameters(),
    ):
        assert a.dtype == torch.float32 and torch.equal(a, b), name
    from grpo_cli.train.trainer import build_trainer

    recipe.output_dir.mkdir(parents=True)
    trainer, _ = build_trainer(recipe, recipe.output_dir)  # through TRL and PEFT: the adapters are float32
    trainable = [p for p in trainer.model.parameters() if p.requires_grad]
    assert trainable and all(p.dtype == torch.float32 for p in trainable)
    lora_recipe = load_recipe(write_recipe(tmp_path, tiny_llama, lora={"r": 4}))
    float32_checkpoint = load_model(lora_recipe.model, None, "bfloat16")
    assert all(p.dtype == torch.float32 for p in float32_checkpoint.parameters())  # not stored in bf16: all widened


def test_lean_lora_computes_what_peft_computes():
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from grpo_cli.generation.lean_lora import lean_lora

    config = AutoConfig.for_model(
        "llama",
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
    )
    torch.manual_seed(0)
    model = get_peft_model(
        AutoModelForCausalLM.from_config(config),
        LoraConfig(r=4, lora_alpha=16, target_modules="all-linear", init_lora_weights=False),
    )
    ids = torch.randint(0, 256, (2, 12))
    with torch.no_grad():
        peft = model(input_ids=ids).logits
        restore = lean_lora(model, torch.float32)
        patched = [m for m in model.modules() if "forward" in vars(m)]
        lean = model(input_ids=ids).logits
        restore()
    assert len(patched) == 2 * 7
    assert torch.allclose(peft, lean, atol=1e-5)
    assert not any("forward" in vars(m) for m in model.modules())  # PEFT's own forward again
    with model.disable_adapter(), torch.no_grad():
        plain = model(input_ids=ids).logits
    assert (plain - lean).abs().max() > 1e-2  # the adapter was in the lean forward

    dropped = get_peft_model(
        AutoModelForCausalLM.from_config(config), LoraConfig(r=4, lora_dropout=0.1, target_modules="all-linear")
    )
    lean_lora(dropped.train(), torch.float32)  # dropout acts in training: PEFT's forward stays
    assert not any("forward" in vars(m) for m in dropped.modules())
    lean_lora(dropped.eval(), torch.float32)  # in evaluation it does nothing: lean
    assert sum("forward" in vars(m) for m in dropped.modules()) == 2 * 7


def test_eval_generates_in_the_training_precision_with_the_adapter_unmerged(tmp_path, tiny_llama):
    """bf16 evaluation casts the weights once and keeps a LoRA adapter beside them: merged into bfloat16 weights,
    an update smaller than their rounding step would vanish."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from grpo_cli.eval.evaluate import settings_of
    from grpo_cli.eval.targets import Target
    from grpo_cli.generation.engines import TRANSFORMERS, build_generator
    from grpo_cli.recipe.precision import compute_dtype

    peft = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32),
        LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False),
    )
    adapter = tmp_path / "adapter"
    peft.save_pretrained(adapter)
    target = Target("adapter", str(tiny_llama), str(adapter))
    ids = torch.tensor([[1, 5, 9, 13, 17, 21]])

    def logits(mixed: str):
        recipe = load_recipe(write_recipe(tmp_path, tiny_llama), [f"model.mixed_precision={mixed}"])
        dtype = compute_dtype(recipe.model, recipe.quantization)
        generator, _ = build_generator(recipe.model, None, target.adapter, TRANSFORMERS, dtype, 4, [], None)
        with torch.inference_mode():
            return recipe, generator.model, generator.model(input_ids=ids).logits.float()

    recipe, bf16_model, bf16 = logits("bf16")
    assert next(bf16_model.parameters()).dtype == torch.bfloat16
    assert any("lora_A" in name for name, _ in bf16_model.named_parameters())  # unmerged
    inv_freq = [b for name, b in bf16_model.named_buffers() if name.endswith("inv_freq")]
    assert inv_freq and all(b.dtype == torch.float32 for b in inv_freq)  # as a base model loaded in bfloat16 has them
    assert settings_of(recipe, target, "bfloat16")["compute_dtype"] == "bfloat16"
    _, fp32_model, fp32 = logits("no")
    assert next(fp32_model.parameters()).dtype == torch.float32
    assert not any("lora_A" in name for name, _ in fp32_model.named_parameters())  # merged
    with torch.inference_mode():
        plain = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32)(input_ids=ids).logits
    adapter_effect = (fp32 - plain).abs().max()
    assert adapter_effect > 0.05  # the adapter matters here ...
    assert (bf16 - fp32).abs().max() < adapter_effect / 5  # ... and bf16 keeps it, up to bf16 rounding
