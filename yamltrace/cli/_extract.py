"""`yamltrace extract`: a dataset's activations to sharded safetensors, on one process or under torchrun.

The input is checked in full (file, text field, tokenizer, spec keys) before the model runs, so a bad
row is reported, with its line, before any shard is written.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from ..errors import YamltraceError
from ._common import EXIT_INVALID, EXIT_OK, EXIT_USAGE, _Usage, checkpoint_class, import_class, model_config, positive_int
from ._report import escape_text, escaped_issue

__all__ = ["add_extract"]

# 128 + the signal: the status a shell shows for a tool stopped by Ctrl-C (SIGINT) or by SIGTERM.
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143

BUILTIN = "builtin:"


def _device(requested: str) -> str:
    """The device for this process: `cuda` becomes `cuda:<LOCAL_RANK>` under torchrun."""
    if requested == "cuda" and "LOCAL_RANK" in os.environ:
        return f"cuda:{os.environ['LOCAL_RANK']}"
    return requested


def _load_model(args: argparse.Namespace) -> Any:
    import torch

    if args.checkpoint is not None:
        from ..checkpoint import from_pretrained
        from ..checkpoint._load import is_yamltrace_model

        if args.config is not None:
            raise _Usage("--config goes with --model (a model built from a config), not with --checkpoint.")
        cls: Any  # a model class, or transformers' AutoModel (not a module class, but from_pretrained takes it)
        if args.model is not None:
            cls = import_class(args.model)
        else:  # the class config.json's `architectures` names, as `check --checkpoint` builds
            cls = checkpoint_class(Path(args.checkpoint))
            if cls is None:
                from transformers import AutoModel

                cls = AutoModel
        extra: dict[str, Any] = {} if is_yamltrace_model(cls) else {"local_files_only": True}
        model = from_pretrained(cls, args.checkpoint, trust_imports=args.trust_imports, **extra)
    else:
        if args.model is None or args.config is None:
            raise _Usage("give --checkpoint DIR, or --model package.module:Class with --config FILE.")
        cls = import_class(args.model)
        config = model_config(cls, args.config)
        torch.manual_seed(args.seed)
        model = cls(config)
    return model.eval().to(_device(args.device))


def _spec(argument: str | None, model: Any, trust_imports: bool) -> Any:
    if argument is None:
        return None
    from ..spec import load_spec

    if argument.startswith(BUILTIN):
        return load_spec(argument, for_model=model, trust_imports=trust_imports)
    return load_spec(Path(argument), for_model=model, trust_imports=trust_imports)


def _texts(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The texts, and how the run records their source: a file by its size and content hash."""
    from ..extraction._data import file_sha256, open_dataset, open_texts

    if args.data is not None:
        if args.split is not None:
            raise _Usage("--split goes with --dataset, not with --data.")
        texts = open_texts(args.data, args.text_field, max_row_bytes=args.max_row_mb * 2**20, columns=args.columns)
        path = Path(args.data)
        return texts, {"data": str(args.data), "bytes": path.stat().st_size, "sha256": file_sha256(path)}
    if args.split is None:
        raise _Usage("--dataset needs --split (for example --split train).")
    return open_dataset(args.dataset, args.split, args.text_field, args.columns), {"dataset": args.dataset, "split": args.split}


def _init_distributed(device: str) -> bool:
    """Join the process group torchrun describes (gloo on CPU, nccl on CUDA); False when not launched so."""
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return False
    dist.init_process_group(backend="nccl" if device.startswith("cuda") else "gloo")
    return True


class _Terminated(KeyboardInterrupt):
    """SIGTERM, turned into an interrupt so that the run stops as it does on Ctrl-C."""


def _terminate(signum: int, frame: Any) -> None:
    raise _Terminated


def _extract(args: argparse.Namespace) -> Any:
    """Everything the command does between its arguments and its summary; the finished `Activations`."""
    from ..extraction import extract
    from ..extraction._data import TokenizedBatches, load_tokenizer, tokenizer_sha256
    from ..intervening import value_names
    from ._values import read_values

    texts, source = _texts(args)
    tokenizer = load_tokenizer(args.tokenizer)
    batches = TokenizedBatches(texts, tokenizer, batch_size=args.batch_size, max_length=args.max_length)
    model = _load_model(args)
    spec = _spec(args.spec, model, args.trust_imports)
    values = read_values(args.values, () if spec is None else value_names(spec))
    source.update(
        text_field=args.text_field, tokenizer=str(args.tokenizer), tokenizer_sha256=tokenizer_sha256(tokenizer),
        max_length=args.max_length, batch_size=args.batch_size,
    )  # fmt: skip
    if args.checkpoint is None:
        source["seed"] = args.seed  # the random weights of a model built from --config
    joined = _init_distributed(_device(args.device))
    try:
        return extract(
            model, spec, batches, args.out, outputs=args.outputs, shard_bytes=args.shard_mb * 2**20, progress=not args.quiet,
            resume=not args.no_resume, data=source, fingerprint_weights=args.fingerprint_weights, columns=args.columns,
            values=values,
        )  # fmt: skip
    finally:
        if joined:
            import torch.distributed as dist

            dist.destroy_process_group()


def _error_lines(error: BaseException) -> list[str]:
    """What the command prints for `error`, every line escaped: a bad-row report and a spec's issues keep one
    line per row or issue, anything else is one line."""
    from ..errors import SpecError
    from ..extraction._data import BadRows

    if isinstance(error, BadRows):
        more = [f"  ... and {error.count - len(error.problems)} more"] if error.count > len(error.problems) else []
        return [
            f"{escape_text(error.source)}: {error.count} bad row(s):",
            *(f"  {escape_text(p)}" for p in error.problems),
            *more,
        ]
    if isinstance(error, SpecError):
        return [escaped_issue(issue) for issue in error.issues]
    message = error.args[0] if isinstance(error, KeyError) and error.args else error
    return [escape_text(str(message))]


def _run_extract(args: argparse.Namespace) -> int:
    from ..extraction import ExtractInterrupted

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        acts = _extract(args)
    except _Usage as e:
        print(f"yamltrace extract: error: {escape_text(str(e))}", file=sys.stderr)
        return EXIT_USAGE
    except (YamltraceError, KeyError, OSError, ValueError) as e:
        lines = _error_lines(e)
        print(f"yamltrace extract: error: {lines[0]}", *lines[1:], sep="\n", file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt as e:
        said = str(e) if isinstance(e, ExtractInterrupted) else (
            f"interrupted; the finished shards in {args.out} are kept: run the same command again to resume."
        )  # fmt: skip
        print(f"yamltrace extract: {escape_text(said)}", file=sys.stderr)
        return EXIT_TERMINATED if isinstance(e, _Terminated) or isinstance(e.__context__, _Terminated) else EXIT_INTERRUPTED
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    if not args.quiet:
        where = escape_text(str(args.out))
        print(
            f"wrote {len(acts)} rows of {', '.join(map(escape_text, acts.keys()))} in {len(acts.index['shards'])} shard(s) to {where}"
        )
    return EXIT_OK


def add_extract(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "extract",
        help="run a model over a dataset and write its captures to sharded safetensors",
        description="Tokenise a text dataset, run the model over it under the spec's capture and write every "
        "captured tensor to OUT/shard-*.safetensors with OUT/index.json (read them with "
        "yamltrace.open_activations). Under torchrun, each process runs a share of the batches. "
        "Exit status: 0 done, 1 bad input, 2 a usage error, 130 / 143 interrupted (Ctrl-C / SIGTERM; rerun to resume).",
    )
    _model_arguments(parser)
    _data_arguments(parser)
    _output_arguments(parser)
    parser.set_defaults(run=_run_extract)


def _model_arguments(parser: argparse.ArgumentParser) -> None:
    model = parser.add_argument_group("model (--checkpoint DIR, or --model with --config)")
    model.add_argument("--checkpoint", metavar="DIR", help="a checkpoint folder (yamltrace.yaml in it is the spec)")
    model.add_argument(
        "--model", metavar="PKG.MOD:CLASS", help="the model class (imported); with --checkpoint, the class to load it as"
    )
    model.add_argument("--config", metavar="FILE", help="a config JSON file to build --model from (random weights, --seed)")
    model.add_argument("--seed", type=int, default=0, help="random seed for a model built from --config (default: 0)")
    model.add_argument("--device", default="cpu", help="cpu, cuda (cuda:LOCAL_RANK under torchrun) or cuda:N (default: cpu)")
    parser.add_argument(
        "--spec", metavar="FILE|builtin:NAME", help="what to capture (default: the checkpoint's or the model's own)"
    )
    parser.add_argument("--outputs", nargs="+", metavar="KEY", help="capture only these keys of the spec")
    parser.add_argument(
        "--values",
        metavar="FILE.safetensors",
        help="the tensors of the spec's {value: NAME} interventions: a tensor NAME for every module edited, or "
        "NAME.0, NAME.1, ... one per module in module order (part of the run: resume refuses other values)",
    )
    parser.add_argument("--trust-imports", action="store_true", help="allow the spec (and checkpoint spec) to import modules")


def _data_arguments(parser: argparse.ArgumentParser) -> None:
    data = parser.add_argument_group("data (--data FILE, or --dataset NAME --split S)").add_mutually_exclusive_group(
        required=True
    )
    data.add_argument(
        "--data", metavar="FILE", help=".jsonl (one object per line), .txt (one text per line) or .parquet (needs pyarrow)"
    )
    data.add_argument("--dataset", metavar="NAME", help="a dataset name for datasets.load_dataset (needs the datasets package)")
    parser.add_argument("--split", metavar="S", help="the --dataset split (train, validation, ...)")
    parser.add_argument(
        "--text-field", default="text", metavar="NAME", help="the field or column holding the text (default: text)"
    )
    parser.add_argument(
        "--columns",
        nargs="+",
        action="extend",
        default=[],
        metavar="NAME",
        help="other fields or columns of each row to store beside the activations (labels, ids); "
        "read them with Activations.column(NAME)",
    )
    parser.add_argument(
        "--tokenizer",
        required=True,
        metavar="DIR",
        help="a folder a transformers tokenizer was saved to (needs the hf extra: pip install 'yamltrace[hf]')",
    )
    parser.add_argument(
        "--max-length", type=positive_int, required=True, metavar="N", help="pad or truncate every text to N tokens"
    )
    parser.add_argument("--batch-size", type=positive_int, default=8, metavar="B", help="texts per forward (default: 8)")


def _output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, metavar="DIR", help="the output folder")
    parser.add_argument(
        "--shard-mb",
        type=positive_int,
        default=256,
        metavar="MB",
        help="close a shard past this many MiB (default: 256; memory holds about 3 shards)",
    )
    parser.add_argument(
        "--no-resume", action="store_true", help="refuse a folder that already holds an extraction (default: continue it)"
    )
    parser.add_argument(
        "--fingerprint-weights", action="store_true", help="make the weights part of the run (resume refuses other weights)"
    )
    parser.add_argument(
        "--max-row-mb",
        type=positive_int,
        default=64,
        metavar="MB",
        help="longest line of --data in MiB; a longer one is a bad row (default: 64)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress and no summary")
