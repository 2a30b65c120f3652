"""Extraction throughput against a plain forward loop, and peak memory against the number of rows.

Throughput: the same batches through `extract` (every layer's hidden state written to shards by the
background writer) and through a plain `model(**batch)` loop under `torch.inference_mode()`, in
alternating order over several rounds, one torch thread, ratio of medians. Two clocks: the CPU time
of the whole process (`time.process_time`, the writer thread included; time other processes hold
the cores is not counted, so this is the figure a shared machine resolves) and wall-clock time; and
each variant's system CPU time and minor page faults (glibc's allocator returning memory to the
system and faulting it back shows there: docs/performance.md, Extraction). Memory: peak RSS of a
fresh process extracting N and 10 N rows.
"""

from __future__ import annotations

import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from harness import record

ROOT = Path(__file__).resolve().parents[2]
# A model whose forward is a few tens of milliseconds on one core: TinyModel, wider and with longer rows.
CONFIG = dict(vocab_size=128, hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4)
ROUNDS = 7
# Shards of a size that makes a run write many (about 15 for the wide model's 120 MiB, 8 for the tiny
# model's 8 MiB), as a long one does, so the last shard (written while nothing else runs) is a small
# part of the time, as it is over a dataset.
SHARD_BYTES = 8 * 2**20
# (name, config, batch, sequence, batches, shard bytes): the wide model, and the 50k-parameter default
# whose forward (about 3 ms) is short enough for the per-batch cost of capture to show.
CASES = [("wide", CONFIG, 8, 128, 24, SHARD_BYTES), ("tiny", {}, 4, 16, 200, 2**20)]


def _model_and_spec(config: dict):
    from yamltrace import OutputRecorder
    from yamltrace.examples.tiny import TinyConfig, TinyDecoderLayer, TinyModel

    torch.manual_seed(0)
    model = TinyModel(TinyConfig(**config)).eval()
    return model, {"hidden_states": OutputRecorder(TinyDecoderLayer, index=0)}


def _batches(count: int, batch: int, seq: int):
    generator = torch.Generator().manual_seed(1)
    for _ in range(count):
        ids = torch.randint(0, 128, (batch, seq), generator=generator)
        yield {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


@pytest.mark.parametrize(("name", "config", "batch", "seq", "count", "shard_bytes"), CASES, ids=[c[0] for c in CASES])
def test_extract_throughput_against_a_plain_forward_loop(
    name: str, config: dict, batch: int, seq: int, count: int, shard_bytes: int
) -> None:
    from yamltrace.extraction import extract

    torch.set_num_threads(1)
    model, spec = _model_and_spec(config)
    batches = list(_batches(count, batch, seq))
    scratch = Path(tempfile.mkdtemp(prefix="bench-extract-"))

    def plain() -> None:
        with torch.inference_mode():
            for batch in batches:
                model(**batch)

    written: list[tuple[int, int]] = []  # (bytes, shards) each extract round wrote

    def extracting() -> None:
        # Into an empty folder; the last round's output is removed outside the timed call (`untimed`).
        extract(model, spec, batches, scratch / "out", progress=False, shard_bytes=shard_bytes)

    def untimed(variant: str) -> None:
        if variant == "extract":
            shards = list((scratch / "out").glob("*.safetensors"))
            written.append((sum(p.stat().st_size for p in shards), len(shards)))
            shutil.rmtree(scratch / "out")

    times: dict[str, list[float]] = {"plain": [], "extract": []}
    cpu: dict[str, list[float]] = {"plain": [], "extract": []}
    # The kernel's share: system CPU time and minor page faults (memory the allocator returned and took back).
    kernel: dict[str, list[tuple[float, int]]] = {"plain": [], "extract": []}
    try:
        plain(), extracting(), untimed("extract")  # warm-up
        for round_ in range(ROUNDS):
            order = [("plain", plain), ("extract", extracting)]
            for variant, run in order if round_ % 2 == 0 else order[::-1]:
                usage = resource.getrusage(resource.RUSAGE_SELF)
                start, start_cpu = time.perf_counter(), time.process_time()
                run()
                times[variant].append(time.perf_counter() - start)
                cpu[variant].append(time.process_time() - start_cpu)
                after = resource.getrusage(resource.RUSAGE_SELF)
                kernel[variant].append((after.ru_stime - usage.ru_stime, after.ru_minflt - usage.ru_minflt))
                untimed(variant)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rows = count * batch
    where = f"{name} {batch}x{seq}"
    for clock, measured in (("CPU", cpu), ("wall", times)):
        plain_s, extract_s = statistics.median(measured["plain"]), statistics.median(measured["extract"])
        record("extract", f"{where}, {clock}: plain loop, {rows} rows", f"{rows / plain_s:,.0f} rows/s ({plain_s * 1e3:.0f} ms)")
        record(
            "extract",
            f"{where}, {clock}: extract, {written[-1][0] / 2**20:.0f} MiB in {written[-1][1]} shards",
            f"{rows / extract_s:,.0f} rows/s ({extract_s * 1e3:.0f} ms)",
        )
        target = ">= 0.98x" if name == "wide" else ">= 0.95x"
        record("extract", f"{where}, {clock}: throughput, extract / plain", f"{plain_s / extract_s:.2f}x", target)
    for variant, figures in kernel.items():
        system, faults = statistics.median(f[0] for f in figures), statistics.median(f[1] for f in figures)
        record("extract", f"{where}, {variant}: system CPU time, minor page faults", f"{system * 1e3:.0f} ms, {faults:,.0f}")


CHILD = """
import json, resource, sys, torch
sys.path.insert(0, sys.argv[1])
from bench_extract import _batches, _model_and_spec
from yamltrace.extraction import extract
torch.set_num_threads(1)
config = dict(vocab_size=128, hidden_size=128, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4)
model, spec = _model_and_spec(config)
acts = extract(model, spec, _batches(int(sys.argv[2]), 8, 64), sys.argv[3], progress=False, shard_bytes=8 * 2**20)
print(json.dumps({"rows": len(acts), "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def test_extract_peak_memory_does_not_grow_with_the_rows() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="bench-extract-rss-"))
    peaks = {}
    try:
        for count in (30, 300):
            out = scratch / str(count)
            command = [sys.executable, "-c", CHILD, str(Path(__file__).parent), str(count), str(out)]
            result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=1200, check=True)
            figures = json.loads(result.stdout.strip().splitlines()[-1])
            written = sum(p.stat().st_size for p in out.glob("*.safetensors"))
            peaks[count] = figures["peak_rss_kib"] / 1024
            record("extract", f"peak RSS, {figures['rows']} rows ({written / 2**20:.0f} MiB written)", f"{peaks[count]:.0f} MiB")
            shutil.rmtree(out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    record("extract", "peak RSS, 10x the rows / 1x", f"{peaks[300] / peaks[30]:.3f}", "<= 1.10")
