"""Tracing across processes: 2 ranks (gloo, CPU), each tracing its shard of a batch through
DistributedDataParallel, FSDP (`FullyShardedDataParallel`, fully sharded, decoder layers wrapped) and
`fully_shard`, capture what one process captures on the same rows, under the same module paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from helpers import assert_same
from yamltrace import OutputRecorder, Spec, intervene
from yamltrace.engine import Intervention
from yamltrace.examples.tiny import TinyConfig, TinyDecoderLayer, TinyModel
from yamltrace.tracing import trace

pytestmark = pytest.mark.slow
WORLD = 2
ROWS_PER_RANK = 2


class Plain(nn.Module):
    """A capture map and no decorated forward: `trace` must find the map inside the wrapper."""

    _can_record_outputs = {"hidden_states": "layers.1", "logits": "head"}

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return self.head(x)


def models() -> tuple[TinyModel, Plain]:
    torch.manual_seed(0)
    return TinyModel(TinyConfig()).eval(), Plain().eval()


def batches() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    rows = WORLD * ROWS_PER_RANK
    return torch.randint(0, 128, (rows, 6), generator=generator), torch.randn(rows, 8, generator=generator)


def traced(model: nn.Module, batch: torch.Tensor) -> dict[str, tuple]:
    """What `trace(model)` captures for one call: each key's values and their module paths."""
    with torch.no_grad(), trace(model) as captures:
        model(batch)
    return {key: (tuple(values), captures.paths(key)) for key, values in captures.items()}


# Steer the last position of layer 1, and zero head 2 of the last layer's attention output.
EDITS = Spec(
    outputs={},
    interventions=[
        Intervention("steer", OutputRecorder(TinyDecoderLayer, layers=(1,), positions=(-1,)), "add", 0.5),
        Intervention("ablate", OutputRecorder(class_name="self_attn", index=0, layers=(-1,)), "zero", heads=(2,)),
    ],
)


def edited(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """The last hidden state of one call under `EDITS`."""
    with torch.no_grad(), intervene(model, EDITS):
        return model(batch).last_hidden_state


def worker(rank: int, store: str, out: str) -> None:
    from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        ids, x = batches()
        rows = slice(rank * ROWS_PER_RANK, (rank + 1) * ROWS_PER_RANK)
        tiny, plain = models()
        results: dict = {
            "ddp": traced(DistributedDataParallel(tiny), ids[rows]),
            "ddp-plain": traced(DistributedDataParallel(plain), x[rows]),
        }
        edits = {"ddp": edited(DistributedDataParallel(tiny), ids[rows])}
        tiny, plain = models()

        def wrap_layers(module: nn.Module, recurse: bool, nonwrapped_numel: int) -> bool:
            return recurse or isinstance(module, TinyDecoderLayer)

        sharded = FullyShardedDataParallel(tiny, auto_wrap_policy=wrap_layers, device_id=torch.device("cpu"))
        assert "_fsdp_wrapped_module.layers.0._fsdp_wrapped_module" in dict(sharded.named_modules())
        results["fsdp"] = traced(sharded, ids[rows])
        edits["fsdp"] = edited(sharded, ids[rows])
        results["fsdp-plain"] = traced(FullyShardedDataParallel(plain, device_id=torch.device("cpu")), x[rows])
        tiny, _ = models()
        for layer in tiny.layers:
            fully_shard(layer)
        fully_shard(tiny)
        results["fully_shard"] = traced(tiny, ids[rows])
        edits["fully_shard"] = edited(tiny, ids[rows])
        torch.save(results, os.path.join(out, f"rank{rank}.pt"))
        torch.save(edits, os.path.join(out, f"edits{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_each_rank_captures_what_one_process_captures_on_its_rows(tmp_path: Path) -> None:
    mp.start_processes(worker, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=WORLD, start_method="spawn")
    ids, x = batches()
    tiny, plain = models()
    for rank in range(WORLD):
        rows = slice(rank * ROWS_PER_RANK, (rank + 1) * ROWS_PER_RANK)
        expected = {"tiny": traced(tiny, ids[rows]), "plain": traced(plain, x[rows])}
        assert len(expected["tiny"]["hidden_states"][0]) == 5 and len(expected["plain"]["logits"][0]) == 1
        results = torch.load(tmp_path / f"rank{rank}.pt", weights_only=False)
        assert set(results) == {"ddp", "ddp-plain", "fsdp", "fsdp-plain", "fully_shard"}
        for name, captured in results.items():
            model = "plain" if name.endswith("plain") else "tiny"
            assert list(captured) == list(expected[model]), (rank, name)
            for key, (values, paths) in captured.items():
                assert paths == expected[model][key][1], (rank, name, key)
                assert_same(values, expected[model][key][0], f"rank {rank} {name} {key}")
        plain_output = tiny(ids[rows]).last_hidden_state
        expected_edit = edited(tiny, ids[rows])
        assert not torch.equal(expected_edit, plain_output)
        edits = torch.load(tmp_path / f"edits{rank}.pt")
        assert set(edits) == {"ddp", "fsdp", "fully_shard"}
        for name, output in edits.items():
            assert torch.allclose(output, expected_edit, atol=1e-6), (rank, name)
