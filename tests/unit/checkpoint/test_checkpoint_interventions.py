"""A checkpoint whose yamltrace.yaml has interventions: applied at load for every call, undone by the
handle the model carries, saved with their tensor files, all or nothing when one cannot apply."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from yamltrace.checkpoint import SPEC_FILE, from_pretrained, save_pretrained
from yamltrace.errors import FolderError, SpecError
from yamltrace.examples.tiny import TinyDecoderLayer, TinyModel
from yamltrace.tracing import trace

STEERED = """\
yamltrace: 1
imports: [yamltrace.examples.tiny]
outputs: {hidden_states: TinyDecoderLayer}
interventions:
  steer:
    target: TinyDecoderLayer
    layers: [1]
    add: {tensor: "steer.safetensors:v"}
  quiet:
    target: TinyMLP
    layers: [-1]
    scale: 0.5
"""
VECTOR = torch.linspace(-1.0, 1.0, 32)


def _steer(module, args, output):  # type: ignore[no-untyped-def]
    return (output[0] + VECTOR,) + output[1:] if isinstance(output, tuple) else output + VECTOR


def _reference(model: TinyModel, input_ids: torch.Tensor, *, hidden_states: bool = False, quiet: bool = True):  # type: ignore[no-untyped-def]
    """The same two edits written as plain forward hooks (the steer alone without `quiet`): the last
    hidden state (or every layer's)."""
    handles = [model.layers[1].register_forward_hook(_steer)]
    if quiet:
        handles.append(model.layers[-1].mlp.register_forward_hook(lambda m, a, out: out * 0.5))
    try:
        with torch.no_grad(), trace(model, {"hidden_states": TinyDecoderLayer}) as captures:
            out = model(input_ids).last_hidden_state
        return captures["hidden_states"] if hidden_states else out
    finally:
        for handle in handles:
            handle.remove()


@pytest.fixture
def steered(tiny: TinyModel, tmp_path: Path) -> Path:
    folder = tmp_path / "steered"
    save_pretrained(tiny, folder)
    save_file({"v": VECTOR}, str(folder / "steer.safetensors"))
    (folder / SPEC_FILE).write_text(STEERED, encoding="utf-8")
    return folder


def _last(model: TinyModel, input_ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids).last_hidden_state


def test_a_loaded_checkpoint_is_edited_until_its_handle_removes_the_edits(tiny, steered, input_ids) -> None:
    model = from_pretrained(TinyModel, steered).eval()
    assert torch.equal(_last(model, input_ids), _reference(tiny, input_ids))
    handle = model.yamltrace_interventions
    assert dict(handle.paths) == {"steer": ("layers.1",), "quiet": ("layers.3.mlp",)}
    handle.remove()
    assert torch.equal(_last(model, input_ids), _last(tiny, input_ids))
    handle.remove()  # idempotent
    assert torch.equal(_last(model, input_ids), _last(tiny, input_ids))


def test_the_edits_hold_in_every_thread(tiny, steered, input_ids) -> None:
    model = from_pretrained(TinyModel, steered).eval()
    got: list[torch.Tensor] = []
    worker = threading.Thread(target=lambda: got.append(_last(model, input_ids)))
    worker.start()
    worker.join()
    assert torch.equal(got[0], _reference(tiny, input_ids))


def test_trace_of_a_loaded_model_records_the_edit_once(tiny, steered, input_ids) -> None:
    model = from_pretrained(TinyModel, steered).eval()
    with torch.no_grad(), trace(model) as captures:
        out = model(input_ids).last_hidden_state
    assert torch.equal(out, _reference(tiny, input_ids))  # the checkpoint's edits, not applied twice
    expected = _reference(tiny, input_ids, hidden_states=True)
    assert len(captures["hidden_states"]) == len(expected)
    for got, want in zip(captures["hidden_states"], expected):
        assert torch.equal(got, want)


def test_save_writes_the_tensor_files_and_reloads_the_same_model(tiny, steered, input_ids, tmp_path) -> None:
    model = from_pretrained(TinyModel, steered).eval()
    again = save_pretrained(model, tmp_path / "again")
    assert sorted(p.name for p in again.iterdir()) == ["config.json", "model.safetensors", "steer.safetensors", SPEC_FILE]
    reloaded = from_pretrained(TinyModel, again).eval()
    assert torch.equal(_last(reloaded, input_ids), _reference(tiny, input_ids))


def test_overrides_keep_the_checkpoint_interventions_and_replace_one_by_name(tiny, steered, input_ids) -> None:
    kept = from_pretrained(TinyModel, steered, overrides={"outputs": {"mlp": "TinyMLP"}}).eval()
    assert [iv.name for iv in kept.yamltrace_spec.interventions] == ["steer", "quiet"]
    assert torch.equal(_last(kept, input_ids), _reference(tiny, input_ids))
    replaced = from_pretrained(
        TinyModel, steered, overrides={"interventions": {"quiet": {"target": "TinyMLP", "layers": [-1], "scale": 1.0}}}
    ).eval()
    assert list(replaced.yamltrace_interventions.paths) == ["steer", "quiet"]
    expected = _reference(tiny, input_ids, quiet=False)
    assert torch.equal(_last(replaced, input_ids), expected)


def test_an_intervention_that_cannot_apply_fails_the_whole_load(steered) -> None:
    text = STEERED + "  missing:\n    class_name: no_such_module\n    zero: true\n"
    (steered / SPEC_FILE).write_text(text, encoding="utf-8")
    with pytest.raises(SpecError, match=r"\$\.interventions\.missing: .*selects no module"):
        from_pretrained(TinyModel, steered)


def test_a_run_time_value_in_a_checkpoint_is_refused_located(steered) -> None:
    text = STEERED.replace('add: {tensor: "steer.safetensors:v"}', "add: {value: direction}")
    (steered / SPEC_FILE).write_text(text, encoding="utf-8")
    with pytest.raises(
        SpecError, match=r"yamltrace\.yaml:\d+:\d+: \$\.interventions\.steer: .*\{value: direction\}.*cannot supply"
    ):
        from_pretrained(TinyModel, steered)


def test_a_tensor_file_linked_out_of_the_checkpoint_folder_is_refused(steered, tmp_path) -> None:
    outside = tmp_path / "outside.safetensors"
    (steered / "steer.safetensors").rename(outside)
    os.symlink(outside, steered / "steer.safetensors")
    with pytest.raises((FolderError, SpecError), match="steer.safetensors"):
        from_pretrained(TinyModel, steered)


def test_inspect_and_check_list_a_checkpoint_interventions(steered, capsys) -> None:
    from yamltrace.cli import main

    assert main(["inspect", str(steered)]) == 0
    listed = capsys.readouterr().out
    assert "intervention 1 steer" in listed and "intervention 2 quiet" in listed
    assert main(["check", str(steered), "--model", "yamltrace.examples.tiny:TinyModel"]) == 0
    checked = capsys.readouterr().out
    assert "intervention steer" in checked and "layers.1" in checked


def _python_spec(reference: str):  # type: ignore[no-untyped-def]
    from yamltrace import OutputRecorder, Spec
    from yamltrace.engine import Intervention

    steer = Intervention("steer", OutputRecorder(TinyDecoderLayer, layers=(1,)), "add", VECTOR, reference=reference)
    return Spec(outputs={}, imports=["yamltrace.examples.tiny"], interventions=[steer])


def test_a_python_built_tensor_edit_saves_under_its_reference(tiny, input_ids, tmp_path) -> None:
    folder = save_pretrained(tiny, tmp_path / "built", spec=_python_spec("steer.safetensors:v"))
    assert (folder / "steer.safetensors").is_file()
    loaded = from_pretrained(TinyModel, folder).eval()
    expected = _reference(tiny, input_ids, quiet=False)
    assert torch.equal(_last(loaded, input_ids), expected)


def test_a_tensor_reference_out_of_the_folder_is_refused_before_anything_is_written(tiny, tmp_path) -> None:
    with pytest.raises(FolderError, match="not a bare file name"):
        save_pretrained(tiny, tmp_path / "a" / "ckpt", spec=_python_spec("../out.safetensors:v"))
    assert not (tmp_path / "a" / "out.safetensors").exists()
    assert not (tmp_path / "a" / "ckpt" / "model.safetensors").exists()


def test_a_re_pointed_checkpoint_link_loads_the_new_target(tiny, steered, input_ids, tmp_path) -> None:
    """`latest -> v1`, loaded, then `latest -> v2` (the same files, another vector): v2's vector applies."""
    v2 = tmp_path / "v2"
    save_pretrained(tiny, v2)
    save_file({"v": VECTOR * 100}, str(v2 / "steer.safetensors"))
    (v2 / SPEC_FILE).write_text(STEERED, encoding="utf-8")
    latest = tmp_path / "latest"
    latest.symlink_to(steered)
    first = from_pretrained(TinyModel, latest).eval()
    latest.unlink()
    latest.symlink_to(v2)
    second = from_pretrained(TinyModel, latest).eval()
    assert torch.equal(second.yamltrace_spec.interventions[0].value, VECTOR * 100)
    assert not torch.equal(_last(first, input_ids), _last(second, input_ids))
