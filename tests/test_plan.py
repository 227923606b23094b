from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from conftest import ROOT, fails_cleanly, write_recipe
from grpo_cli.cli import app
from grpo_cli.plan import architectures
from grpo_cli.plan.memory import GIB, memory_plan
from grpo_cli.recipe.validation import load_recipe

runner = CliRunner()


def plan_for(recipe_path, *overrides, gpu=None):
    recipe = load_recipe(recipe_path, list(overrides))
    return memory_plan(recipe, architectures.resolve(recipe.model), "cuda", gpu)


def test_worked_example_llama_8b_20k_tokens():
    """design.md section 5: unchunked logits 78.3 GB, KV cache 2.5 GB per sequence at 20K context."""
    plan = plan_for(
        ROOT / "recipes/llama3.1/8b_qlora.yaml",
        "grpo.num_generations=8",
        "training.per_device_train_batch_size=8",
        "training.gradient_accumulation_steps=1",
        "data.max_prompt_length=480",
        "grpo.max_completion_length=20000",
    )
    assert plan.term("logits if unchunked").bytes / GIB == pytest.approx(78.3, abs=0.05)
    assert plan.term("generation KV cache").bytes / 8 / GIB == pytest.approx(2.5, abs=0.01)


def test_builtin_architectures_match_their_parameter_counts():
    # Published sizes: Qwen2.5-0.5B 494M, Qwen2.5-7B 7.62B, Llama-3.1-8B 8.03B, SmolLM2-135M 134.5M.
    expected = {
        "Qwen/Qwen2.5-0.5B-Instruct": 494e6,
        "Qwen/Qwen2.5-7B-Instruct": 7.62e9,
        "meta-llama/Llama-3.1-8B-Instruct": 8.03e9,
        "HuggingFaceTB/SmolLM2-135M-Instruct": 134.5e6,
    }
    for name, params in expected.items():
        assert architectures.lookup_builtin(name).params == pytest.approx(params, rel=0.01), name


def test_methods_order_memory():
    full = plan_for(ROOT / "recipes/qwen2.5/1.5b_full.yaml", "training.optim=adamw_torch")
    lora = plan_for(ROOT / "recipes/qwen2.5/1.5b_full.yaml", "training.optim=adamw_torch", "lora.r=16")
    qlora = plan_for(
        ROOT / "recipes/qwen2.5/1.5b_full.yaml", "training.optim=adamw_torch", "lora.r=16", "quantization.bits=4"
    )
    assert full.peak_tensors > lora.peak_tensors > qlora.peak_tensors
    assert qlora.term("weights").bytes < lora.term("weights").bytes / 2.5
    beta = plan_for(ROOT / "recipes/qwen2.5/1.5b_full.yaml", "grpo.beta=0.04")
    assert beta.term("reference model").bytes == pytest.approx(beta.term("weights").bytes)
    assert plan_for(ROOT / "recipes/qwen2.5/1.5b_lora.yaml", "grpo.beta=0.04").term("reference model").bytes == 0


def test_foreach_adamw_holds_one_more_parameter_set_at_the_step_on_cuda_only():
    """Seen on an H100: torch's AdamW steps all parameters at once on CUDA (one sqrt(exp_avg_sq) per parameter beside
    the gradients); the plan missed it by 20% on Llama-3.2-1B's full fine-tuning."""
    recipe = load_recipe(ROOT / "recipes/qwen2.5/1.5b_full.yaml", ["training.optim=adamw_torch"])
    arch = architectures.resolve(recipe.model)
    cuda = memory_plan(recipe, arch, "cuda")
    assert cuda.term("optimizer step temporaries").bytes == cuda.term("gradients").bytes
    names = lambda plan: {t.name for t in plan.terms}  # noqa: E731
    assert "optimizer step temporaries" not in names(memory_plan(recipe, arch, "cpu"))
    fused = load_recipe(ROOT / "recipes/qwen2.5/1.5b_full.yaml", ["training.optim=adamw_torch_fused"])
    assert "optimizer step temporaries" not in names(memory_plan(fused, arch, "cuda"))


def test_full_fine_tuning_keeps_each_trainable_linears_input():
    """Seen in an H100 allocator trace: without checkpointing, full fine-tuning kept 57.6 KB per token and layer where
    the plan had 36.7; a trainable Linear keeps its input for its weight gradient, a frozen (LoRA) one does not."""
    recipe = ROOT / "recipes/qwen2.5/1.5b_full.yaml"
    no_ckpt = ["model.gradient_checkpointing=false", "model.mixed_precision=no"]
    full_recipe = load_recipe(recipe, no_ckpt)
    arch = architectures.resolve(full_recipe.model)
    full = plan_for(recipe, *no_ckpt)
    lora = plan_for(recipe, *no_ckpt, "lora.r=16", "lora.dropout=0", "lora.target_modules=[q_proj]")
    token_layers = (
        full_recipe.training.per_device_train_batch_size
        * (full.prompt_tokens + full.completion_tokens)
        * arch.num_layers
    )
    # bf16 weights: full fine-tuning keeps 2 B per distinct Linear input; the one float32 adapter keeps a 4 B copy
    difference = full.term("activations").bytes - lora.term("activations").bytes
    assert difference == pytest.approx(token_layers * (arch.distinct_linear_inputs * 2 - arch.hidden_size * 4))
    assert arch.distinct_linear_inputs == 3 * arch.hidden_size + arch.intermediate_size  # q/k/v, o, gate/up, down


def test_a_gpu_fit_within_the_measured_cuda_error_is_called_close():
    recipe = ROOT / "recipes/qwen2.5/1.5b_full.yaml"
    expected = json.loads(runner.invoke(app, ["plan", str(recipe), "--gpu", "80GB", "--json"]).stdout)
    expected_gib = expected["peak_nvidia_smi_gib"]
    roomy = runner.invoke(app, ["plan", str(recipe), "--gpu", f"{expected_gib * 1.5:.1f}GB"])
    tight = runner.invoke(app, ["plan", str(recipe), "--gpu", f"{expected_gib * 1.02:.2f}GB"])
    assert "fits" in roomy.output and "close" not in roomy.output
    assert "fits" in tight.output and "close:" in tight.output and "grpo preflight" in tight.output


def test_plan_cli_fit_verdict_and_suggestions_validate():
    recipe = ROOT / "recipes/qwen2.5/1.5b_full.yaml"
    result = runner.invoke(app, ["plan", str(recipe), "training.optim=adamw_torch", "--gpu", "12GB", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["fits"] is False and data["suggestions"]
    for suggestion in data["suggestions"]:
        overrides = ["training.optim=adamw_torch", *suggestion["overrides"]]
        assert runner.invoke(app, ["validate", str(recipe), *overrides]).exit_code == 0
        assert suggestion["peak_expected_gib"] <= 12
    table = runner.invoke(app, ["plan", str(recipe), "--gpu", "RTX 4090"])
    assert table.exit_code == 0 and "fits" in table.output and "peak tensors" in table.output


def test_every_suggestion_lowers_the_planned_peak():
    """A suggestion must change what sets the memory; checked on recipes of each method, both devices, tight GPUs."""
    from grpo_cli.plan.fit import candidate_changes, suggest
    from grpo_cli.recipe.validation import with_changes

    seen = 0
    for name in ("qwen2.5/1.5b_full.yaml", "qwen2.5/0.5b_lora.yaml", "llama3.1/8b_qlora.yaml"):
        for extra in ([], ["model.gradient_checkpointing=false"]):
            recipe = load_recipe(ROOT / "recipes" / name, ["training.optim=adamw_torch", *extra])
            arch = architectures.resolve(recipe.model)
            for device in ("cuda", "cpu"):
                before = memory_plan(recipe, arch, device)
                # Fewer generations per prompt halves the completions per micro-batch too, so what the batch
                # sets (activations, KV cache) shrinks; whether the peak does depends on which phase is highest.
                generations = [o for label, o in candidate_changes(recipe) if "generations" in label]
                assert generations, name
                fewer = memory_plan(with_changes(recipe, generations[0]), arch, device)
                for term in ("activations", "generation KV cache"):
                    assert fewer.term(term).bytes < before.term(term).bytes, (name, term)
                for fraction in (0.6, 0.9):
                    gpu = before.expected * fraction
                    for label, changes, peak in suggest(recipe, arch, device, gpu):
                        after = memory_plan(with_changes(recipe, changes), arch, device, gpu)
                        assert after.expected < before.expected and after.fits and peak == after.expected, label
                        seen += 1
    assert seen >= 10


def test_plan_unknown_architecture_offline_names_the_fields(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = tmp_path / "r.yaml"
    path.write_text("model:\n  name: someone/unknown-model\nrewards: [correctness]\n")
    result = runner.invoke(app, ["plan", str(path)])
    assert result.exit_code == 2 and "model.architecture" in result.output and "hidden_size" in result.output
    manual = tmp_path / "m.yaml"
    manual.write_text(
        "model:\n  name: someone/unknown-model\n  architecture: {hidden_size: 512, num_layers: 4, num_heads: 8, "
        "num_kv_heads: 2, head_dim: 64, intermediate_size: 1024, vocab_size: 32000}\nrewards: [correctness]\n"
    )
    assert runner.invoke(app, ["plan", str(manual)]).exit_code == 0


def test_plan_imports_neither_torch_nor_training():
    """`grpo plan` runs before any weight exists: the whole command, not just its modules, stays torch-free."""
    code = (
        "import sys; from grpo_cli.cli import app; "
        f"app(['plan', {str(ROOT / 'recipes/llama3.1/8b_qlora.yaml')!r}, '--json'], standalone_mode=False); "
        "print(sorted(m for m in sys.modules if m in ('torch', 'trl', 'transformers') "
        "or m.startswith('grpo_cli.train')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    *plan_output, imported = done.stdout.strip().splitlines()
    assert imported == "[]"
    assert json.loads("\n".join(plan_output))["params"] > 8e9


def test_local_model_dir_architecture(tiny_qwen2, tmp_path):
    recipe = load_recipe(write_recipe(tmp_path, tiny_qwen2))
    arch = architectures.resolve(recipe.model)
    assert arch.qkv_bias and not arch.tie_word_embeddings and arch.hidden_size == 32


def test_plan_reads_the_architecture_from_a_gguf_header(tmp_path, monkeypatch):
    """A model that exists only as a .gguf file: its shape comes from the header, no weight is read."""
    import gguf
    import numpy as np

    path = tmp_path / "Tiny-Model.Q8_0.gguf"
    writer = gguf.GGUFWriter(str(path), "qwen2")
    for key, value in (
        ("block_count", 3),
        ("embedding_length", 64),
        ("feed_forward_length", 160),
        ("attention.head_count", 4),
        ("attention.head_count_kv", 2),
    ):
        writer.add_uint32(f"qwen2.{key}", value)
    writer.add_token_list([f"t{i}" for i in range(100)])
    for name in ("token_embd.weight", "blk.0.attn_q.bias"):
        writer.add_tensor(name, np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    recipe = path.with_suffix(".yaml")
    recipe.write_text(f"model:\n  name: {path}\nrewards: [correctness]\n")
    arch = architectures.resolve(load_recipe(recipe, scope="plan").model)
    assert (arch.num_layers, arch.hidden_size, arch.num_heads, arch.num_kv_heads, arch.head_dim) == (3, 64, 4, 2, 16)
    assert (arch.intermediate_size, arch.vocab_size, arch.tie_word_embeddings, arch.qkv_bias) == (160, 100, True, True)
    # Not converted yet: the plan gives the one-time conversion's peak (runtime + 4 B per element), then no more.
    from grpo_cli.gguf import converted_dir

    monkeypatch.setenv("GRPO_CACHE", str(tmp_path / "cache"))
    first = runner.invoke(app, ["plan", str(recipe), "--device", "cpu", "--ram", "0.3GB"])
    assert first.exit_code == 0 and "first load converts the .gguf" in first.output
    assert "more than the 0.3 GiB given" in first.output.replace("\n", " ")  # the conversion alone would not fit
    planned = json.loads(runner.invoke(app, ["plan", str(recipe), "--device", "cpu", "--json"]).output)
    assert planned["gguf_conversion_peak_rss_gib"] == pytest.approx(0.36 + 4 * 32 / 2**30, abs=1e-4)
    (converted_dir(path) / "config.json").parent.mkdir(parents=True)
    (converted_dir(path) / "config.json").write_text("{}")
    planned = json.loads(runner.invoke(app, ["plan", str(recipe), "--device", "cpu", "--json"]).output)
    assert planned["gguf_conversion_peak_rss_gib"] is None
    path.write_bytes(path.read_bytes()[:40])  # a cut file: one line, not a traceback
    result = runner.invoke(app, ["plan", str(recipe)])
    assert result.exit_code == 2 and "cannot read the architecture" in result.output


def test_plan_refuses_flags_it_would_misread_or_drop():
    """Zero memory, an unknown device, and two flags of which one would go unused: one line each."""
    recipe = str(ROOT / "recipes/qwen2.5/1.5b_full.yaml")  # names its GPU: hardware.gpu A100-40GB

    def plan(*args):
        return runner.invoke(app, ["plan", recipe, *args])

    fails_cleanly(plan("--gpu", "0GB"), "`0GB` is zero", "--gpu 24GB")
    fails_cleanly(plan("--device", "tpu"), "--device 'tpu'", "cuda, cpu")
    fails_cleanly(plan("--gpu", "24GB", "--device", "cpu"), "--gpu and --device cpu disagree", "drop --gpu")
    fails_cleanly(plan("--gpu", "24GB", "--ram", "64GB"), "--ram is for a CPU plan", "drop --ram")
    fails_cleanly(plan("--device", "cuda", "--ram", "64GB"), "--ram is for a CPU plan")
    fails_cleanly(plan("--device", "cpu", "--ram", "0GB"), "--ram '0GB'")
    on_ram = json.loads(plan("--ram", "64GB", "--json").stdout)  # --ram alone: the CPU run, over the recipe's GPU
    assert on_ram["device"] == "cpu" and on_ram["gpu_gib"] == 64
    on_gpu = json.loads(plan("--device", "CUDA", "--json").stdout)
    assert on_gpu["device"] == "cuda" and on_gpu["gpu"] == "A100-40GB"


def test_a_budget_beyond_the_models_context_is_one_line(tmp_path, tiny_llama, monkeypatch):
    """tiny_llama was built with 512 positions; the built-in table and config.json's RoPE scaling say theirs."""
    recipe = write_recipe(tmp_path, tiny_llama)
    line = fails_cleanly(runner.invoke(app, ["plan", str(recipe), "grpo.max_completion_length=600"]), "512 positions")
    assert line.startswith("grpo.max_completion_length:") and "at most 512" in line, line
    over = ["data.max_prompt_length=100", "grpo.max_completion_length=450"]
    fails_cleanly(runner.invoke(app, ["plan", str(recipe), *over]), "+ 100 of prompt", "at most 412")
    assert runner.invoke(app, ["plan", str(recipe), "data.max_prompt_length=100"]).exit_code == 0

    import grpo_cli.models as models

    def never(*args, **kwargs):
        raise AssertionError("the model loaded before the budget was checked")

    monkeypatch.setattr(models, "load_model", never)
    fails_cleanly(runner.invoke(app, ["train", str(recipe), *over]), "+ 100 of prompt", "512 positions")
    assert not (tmp_path / "run").exists()

    qwen = str(ROOT / "recipes/qwen2.5/0.5b_lora.yaml")
    fails_cleanly(runner.invoke(app, ["plan", qwen, "grpo.max_completion_length=40000"]), "32768 positions")
    config = {"max_position_embeddings": 32768, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}
    assert architectures._positions(config) == 131072
    llama3 = {"rope_type": "llama3", "factor": 32.0, "original_max_position_embeddings": 8192}
    assert architectures._positions({"max_position_embeddings": 131072, "rope_parameters": llama3}) == 131072


def test_suggestions_only_name_recipe_fields():
    """A schema field renamed without its suggestion fails here, not silently in front of a user."""
    from grpo_cli.plan.fit import candidate_changes
    from grpo_cli.recipe.validation import is_schema_field

    recipe = load_recipe(ROOT / "recipes/qwen2.5/1.5b_full.yaml", ["model.gradient_checkpointing=false"])
    keys = {key for _, changes in candidate_changes(recipe) for key in changes}
    assert len(keys) >= 7
    assert all(is_schema_field(tuple(key.split("."))) for key in keys), keys


def test_lora_under_autocast_counts_frozen_linears_once_cast():
    """float32 weights, LoRA, bf16 autocast: the frozen decoder Linears are stored in bfloat16 (frozen_weights.py)."""
    recipe = ROOT / "recipes/qwen2.5/1.5b_full.yaml"
    lora = ("model.dtype=float32", "lora.r=16")
    arch = architectures.resolve(load_recipe(recipe, list(lora)).model)
    cast = plan_for(recipe, *lora, "model.mixed_precision=bf16").term("weights").bytes
    kept = plan_for(recipe, *lora, "model.mixed_precision=no").term("weights").bytes
    assert kept == arch.params * 4
    assert cast == arch.linear_params * 2 + (arch.params - arch.linear_params) * 4
    full = plan_for(recipe, "model.dtype=float32", "model.mixed_precision=bf16").term("weights").bytes
    assert full == arch.params * 4  # full fine-tuning trains them: float32 masters
    # with vLLM the sync merges the adapter into the frozen weights, so they stay float32 (frozen_weights.py)
    with_vllm = load_recipe(recipe, [*lora, "model.mixed_precision=bf16", "grpo.use_vllm=true"])
    assert memory_plan(with_vllm, arch, "cpu").term("weights").bytes == arch.params * 4


def test_a_lora_layers_backward_on_cuda_holds_the_input_cast_and_the_recomputed_mlps_gradients():
    """Seen in an H100 allocator trace: one layer's backward holds PEFT's float32 copy of its widest adapted input and,
    recomputed under checkpointing, the gradients of the MLP's two f-wide activations; both after the head's backward.
    Target modules that name no Linear of the model (a typo the recipe cannot check) plan without the cast."""
    recipe = ROOT / "recipes/qwen2.5/1.5b_lora.yaml"
    base = ["model.dtype=bfloat16", "model.gradient_checkpointing=true"]
    plan = plan_for(recipe, *base)
    arch = architectures.resolve(load_recipe(recipe, base).model)
    T = plan.term("activations").bytes // (arch.num_layers * arch.hidden_size * 2)  # layer-input checkpoints
    cast, grads = plan.term("adapter input cast"), plan.term("recomputed layer gradients")
    assert cast.bytes == T * arch.intermediate_size * 4 and cast.phase == "training-recompute"
    assert grads.bytes == 2 * T * arch.intermediate_size * 2 and grads.phase == "training-recompute"
    names = lambda plan: {t.name for t in plan.terms}  # noqa: E731
    cpu = memory_plan(load_recipe(recipe, base), arch, "cpu")
    assert not {"adapter input cast", "recomputed layer gradients"} & names(cpu)  # in the CPU's fitted constants
    typo = plan_for(recipe, *base, "lora.target_modules=[qkv_proj]")
    assert "adapter input cast" not in names(typo) and "recomputed layer gradients" in names(typo)


def test_plan_says_tool_results_share_the_completion_budget():
    with_tools = ROOT / "recipes/gsm8k/qwen2.5_coder_0.5b_calculator_cpu.yaml"
    without = ROOT / "recipes/gsm8k/qwen2.5_coder_0.5b_cpu.yaml"
    notes = json.loads(runner.invoke(app, ["plan", str(with_tools), "--gpu", "24GB", "--json"]).stdout)["notes"]
    assert len(notes) == 1 and "max_completion_length (512 tokens" in notes[0] and "up to 4" in notes[0]
    assert json.loads(runner.invoke(app, ["plan", str(without), "--gpu", "24GB", "--json"]).stdout)["notes"] == []
    table = runner.invoke(app, ["plan", str(with_tools), "grpo.max_tool_calling_iterations=null", "--gpu", "24GB"])
    assert table.exit_code == 0 and "any number of tool-calling turns" in " ".join(table.output.split())
