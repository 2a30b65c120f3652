"""transformers 5.25 kernelizes a model loaded with `from_pretrained` (hub kernels on, the default), and
`train()` / `eval()` kernelize again, popping the instance `forward` of every module whose class is
marked for hub kernels (every `LlamaRMSNorm`): yamltrace's captures, edits and a checkpoint's
interventions are torch hooks and survive it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from packaging.version import Version

import yamltrace
from helpers import hook_count
from helpers_transformers import tiny_llama_config

transformers = pytest.importorskip("transformers")
from transformers.models.llama.modeling_llama import LlamaForCausalLM, LlamaRMSNorm  # noqa: E402

pytestmark = pytest.mark.skipif(
    Version(transformers.__version__) < Version("5.25.0"), reason="transformers kernelizes at from_pretrained from 5.25 on"
)
IDS = torch.tensor([[1, 5, 9, 13, 17, 21]])
ZERO_NORM = "yamltrace: 1\ninterventions:\n  z:\n    class_name: model.norm\n    zero: true\n"


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    assert os.environ.get("USE_HUB_KERNELS", "1") not in ("0", "false", "False")  # hub kernels on, as by default
    torch.manual_seed(0)
    LlamaForCausalLM(tiny_llama_config()).save_pretrained(tmp_path)
    return tmp_path


def _kernelized_again(model: torch.nn.Module) -> None:
    model.train()
    model.eval()


def test_captures_survive_train_eval(saved: Path) -> None:
    model = LlamaForCausalLM.from_pretrained(saved).eval()
    norms = [m for m in model.modules() if isinstance(m, LlamaRMSNorm)]
    with torch.no_grad(), yamltrace.trace(model, {"norms": LlamaRMSNorm}) as captures:
        model(IDS)
        _kernelized_again(model)
        model(IDS)
    assert len(captures["norms"]) == 2 * len(norms)
    assert all(torch.equal(a, b) for a, b in zip(captures.steps[0]["norms"], captures.steps[1]["norms"], strict=True))
    assert hook_count(model) == 0


def test_edits_survive_train_eval(saved: Path) -> None:
    model = LlamaForCausalLM.from_pretrained(saved).eval()
    with torch.no_grad():
        plain = model(IDS).logits
        handle = yamltrace.apply_interventions(model, ZERO_NORM)
        edited = model(IDS).logits
        _kernelized_again(model)
        assert torch.equal(model(IDS).logits, edited) and not torch.equal(edited, plain)
        handle.remove()
        assert torch.equal(model(IDS).logits, plain)


def test_a_checkpoints_interventions_survive_train_eval(saved: Path) -> None:
    plain_model = LlamaForCausalLM.from_pretrained(saved).eval()
    (saved / "yamltrace.yaml").write_text(ZERO_NORM)
    model = yamltrace.from_pretrained(LlamaForCausalLM, str(saved)).eval()
    with torch.no_grad():
        plain = plain_model(IDS).logits
        edited = model(IDS).logits
        _kernelized_again(model)
        assert torch.equal(model(IDS).logits, edited) and not torch.equal(edited, plain)
