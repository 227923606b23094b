"""The private TRL and vLLM names grpo relies on (grpo_cli/libraries/seams.py): a name that is gone or takes other
arguments is one line naming the library's version and what happens instead, before any weight loads.

Tests marked `vllm` take a name away from the installed vLLM (vllm-cpu on a CPU); the others run everywhere.
"""

from __future__ import annotations

import inspect
import json
import sys
import types

import pytest
from typer.testing import CliRunner

from conftest import fails_cleanly, write_recipe
from grpo_cli.cli import app
from grpo_cli.libraries import names, seams

runner = CliRunner()
NEEDS_VLLM = "vLLM is not installed (vllm-cpu on a CPU)"


@pytest.fixture
def loads(monkeypatch) -> list:
    """Every model load grpo starts (train's and eval's transformers loader, vLLM's engine), recorded and refused."""
    from grpo_cli import models

    calls = []

    def refuse(*args, **kwargs):
        calls.append(args)
        raise AssertionError("a model loaded")

    monkeypatch.setattr(models, "load_model", refuse)
    if "vllm" in sys.modules or _has_vllm():
        import vllm

        monkeypatch.setattr(vllm, "LLM", refuse)
    return calls


def _has_vllm() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def test_every_listed_trl_name_is_in_the_installed_trl():
    assert seams.trl_problems() == []


def test_a_name_that_lost_a_keyword_or_takes_other_arguments_is_named(monkeypatch):
    library = types.ModuleType("fake_library")
    library.reload = lambda weights_iterator=None, is_checkpoint_format=True: None
    library.renamed = lambda weights_iterator=None, checkpoint_format=True: None
    library.widened = lambda a, b, c: None
    library.open_ended = lambda *args, **kwargs: None
    monkeypatch.setitem(sys.modules, "fake_library", library)
    takes = ("weights_iterator", "is_checkpoint_format")
    assert names.problem(names.Name("fake_library", "reload", "syncs with", takes)) is None
    assert names.problem(names.Name("fake_library", "renamed", "syncs with", takes)) == (
        "has fake_library.renamed, but it takes no is_checkpoint_format"
    )
    assert "takes 3 arguments, not the 2 passed" in names.problem(names.Name("fake_library", "widened", "", arity=2))
    assert names.problem(names.Name("fake_library", "open_ended", "", takes, arity=5)) is None
    assert names.problem(names.Name("fake_library", "gone", "")) == "has no fake_library.gone"
    assert names.problem(names.Name("fake_library_gone", "x", "")).startswith("has no module fake_library_gone")


def test_a_trl_without_a_listed_name_stops_grpo_train_before_any_weight_loads(tmp_path, tiny_llama, monkeypatch, loads):
    renamed = names.Name("trl", "GRPOTrainer._renamed_in_a_new_trl", "stands for a renamed method by calling")
    monkeypatch.setattr(seams, "TRL_NAMES", (*seams.TRL_NAMES, renamed))
    result = runner.invoke(app, ["train", str(write_recipe(tmp_path, tiny_llama))])
    version = f"trl {seams.trl_version()}"
    line = fails_cleanly(result, version, "_renamed_in_a_new_trl", seams.TRL_CHECKED, "pip install")
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert loads == [] and not (tmp_path / "run").exists(), line


def test_an_engine_without_the_runner_path_is_refused_in_one_line():
    from grpo_cli.errors import UserError

    with pytest.raises(UserError, match=r"has no LLM\.llm_engine\.model_executor\.driver_worker\.model_runner"):
        seams.engine_runner(types.SimpleNamespace(llm_engine=types.SimpleNamespace()))


def test_the_one_product_functions_take_the_arguments_listed_for_vllms():
    from grpo_cli.generation import vllm_cpu_lora

    for name, arity in seams.LORA_ARITY.items():
        assert len(inspect.signature(getattr(vllm_cpu_lora, name)).parameters) == arity, name
    assert "add_inputs" in inspect.signature(vllm_cpu_lora.bgmv_expand).parameters


def vllm_train_recipe(tmp_path, model):
    grpo = {"num_generations": 2, "max_completion_length": 8, "temperature": 1.0, "use_vllm": True}
    return write_recipe(tmp_path, model, lora={"r": 4, "alpha": 8, "dropout": 0.0}, grpo=grpo)


@pytest.mark.vllm
@pytest.mark.parametrize("change", ["removed", "re-signed"])
def test_a_vllm_without_its_weight_sync_refuses_cpu_training_before_any_weight_loads(
    tmp_path, vllm_model, monkeypatch, loads, change
):
    pytest.importorskip("vllm", reason=NEEDS_VLLM)
    import torch
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    if change == "removed":  # CPUModelRunner inherits it
        monkeypatch.delattr(GPUModelRunner, "reload_weights")
    else:
        monkeypatch.setattr(CPUModelRunner, "reload_weights", lambda self, weights_iterator=None: None)
    result = runner.invoke(app, ["train", str(vllm_train_recipe(tmp_path, vllm_model))])
    line = fails_cleanly(result, "grpo.use_vllm", seams.vllm_label(), "reload_weights", seams.VLLM_CHECKED)
    assert ("takes no is_checkpoint_format" in line) == (change == "re-signed"), line
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert loads == [] and not (tmp_path / "run").exists()


def eval_args(model, output, *extra: str) -> list[str]:
    common = ["--data", "generated", "--limit", "4", "eval.max_new_tokens=8", "model.dtype=float32"]
    return [
        "eval",
        "model",
        "--model",
        str(model),
        *common,
        "model.mixed_precision=no",
        "--output",
        str(output),
        *extra,
    ]


@pytest.mark.vllm
def test_an_engine_name_gone_is_a_refusal_under_engine_vllm_and_transformers_under_auto(
    tmp_path, vllm_model, monkeypatch, loads
):
    pytest.importorskip("vllm", reason=NEEDS_VLLM)
    from vllm.v1.engine.llm_engine import LLMEngine

    monkeypatch.delattr(LLMEngine, "add_request")
    result = runner.invoke(app, eval_args(vllm_model, tmp_path / "vllm", "--engine", "vllm"))
    fails_cleanly(result, "--engine vllm", seams.vllm_label(), "LLMEngine.add_request", "--engine transformers")
    assert loads == [] and not (tmp_path / "vllm").exists()
    monkeypatch.undo()  # the transformers engine loads the model itself
    monkeypatch.delattr(LLMEngine, "add_request")
    result = runner.invoke(app, eval_args(vllm_model, tmp_path / "auto"))
    assert result.exit_code == 0, result.output
    assert "LLMEngine.add_request" in result.output and "generating with transformers" in result.output
    summary = json.loads((tmp_path / "auto" / "summary.json").read_text())
    assert summary["session"]["engine"] == "transformers" and summary["session"]["lora_path"] is None


@pytest.mark.vllm
def test_a_lora_function_gone_takes_vllms_own_path_with_a_notice_and_never_resumes_on_the_other(
    tmp_path, vllm_model, monkeypatch
):
    """The notice and the path are decided before the engine starts; a folder made on one LoRA path is refused on
    the other before anything loads."""
    pytest.importorskip("vllm", reason=NEEDS_VLLM)
    import torch
    import vllm.lora.ops.torch_ops as own
    import vllm.lora.punica_wrapper.punica_cpu  # noqa: F401  (imported first: it keeps the function it imported)
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from grpo_cli.generation.engines import choose_engine
    from grpo_cli.recipe.validation import load_recipe

    torch.manual_seed(1)
    peft = get_peft_model(
        AutoModelForCausalLM.from_pretrained(vllm_model, dtype=torch.float32),
        LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False),
    )
    adapter = tmp_path / "adapter"
    peft.save_pretrained(adapter)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    # Gone from vLLM's torch ops, which the one-product functions hand a batch of several adapters to; vLLM's own
    # CPU wrapper keeps the function it imported, so its own path still runs.
    monkeypatch.delattr(own, "sgmv_expand")
    choice = choose_engine("vllm", load_recipe(write_recipe(tmp_path, vllm_model)).quantization, str(adapter), False)
    assert choice.lora_path == "vllm-own" and "sgmv_expand" in choice.note and seams.vllm_label() in choice.note
    result = runner.invoke(app, eval_args(vllm_model, tmp_path / "own", "--adapter", str(adapter), "--engine", "vllm"))
    assert result.exit_code == 0, result.output
    assert "vLLM's own LoRA path" in result.output and "sgmv_expand" in result.output
    assert json.loads((tmp_path / "own" / "settings.json").read_text())["lora_path"] == "vllm-own"
    assert json.loads((tmp_path / "own" / "summary.json").read_text())["session"]["lora_path"] == "vllm-own"
    monkeypatch.undo()  # the one-product path is back: the same folder is another evaluation now
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    from grpo_cli import models

    calls = []
    monkeypatch.setattr(models, "load_model", lambda *a, **k: calls.append(a))
    import vllm

    monkeypatch.setattr(vllm, "LLM", lambda *a, **k: calls.append(a))
    result = runner.invoke(app, eval_args(vllm_model, tmp_path / "own", "--adapter", str(adapter), "--engine", "vllm"))
    fails_cleanly(result, "lora_path", "'vllm-own' there", "'vllm-one-product' now")
    assert calls == []


@pytest.mark.vllm
def test_a_lora_function_that_takes_other_arguments_leaves_vllms_wrapper_alone(monkeypatch):
    pytest.importorskip("vllm", reason=NEEDS_VLLM)
    import vllm.lora.punica_wrapper.punica_cpu as wrapper

    from grpo_cli.generation import vllm_cpu_lora

    widened = lambda inputs, weights, output, indices, scaling=1.0, extra=None: None  # noqa: E731
    monkeypatch.setattr(wrapper, "bgmv_shrink", widened)
    notice = seams.lora_products_notice()
    assert "punica_cpu.bgmv_shrink, but it takes 6 arguments, not the 5 passed" in notice, notice
    assert "vLLM's own LoRA path" in notice
    assert not vllm_cpu_lora.use_single_adapter_products() and wrapper.bgmv_shrink is widened
