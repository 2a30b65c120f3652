"""Render sweep results as `docs/fidelity.md`: totals, per-family tables, differences, exclusions."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable

from ._compare import VARIANT_NAMES, VARIANTS, Result
from ._enumerate import POPULAR

__all__ = ["totals", "render"]

BUILT = ("inputs", "forward", "no-output", "compared")  # statuses reached after the model was constructed


def totals(results: Iterable[Result]) -> dict[str, int]:
    """Counts over results: enumerated, built, ran, compared, and equal/differs/error per variant."""
    results = list(results)
    counts = {"enumerated": len(results)}
    counts["built"] = sum(r.status in BUILT for r in results)
    counts["ran"] = sum(r.status in ("no-output", "compared") for r in results)
    counts["compared"] = sum(r.status == "compared" for r in results)
    for variant in VARIANTS:
        outcomes = Counter(r.variants.get(variant, "").split(":")[0] for r in results if r.status == "compared")
        counts[f"equal_{variant}"] = outcomes["equal"]
        counts[f"differs_{variant}"] = outcomes["differs"]
        counts[f"error_{variant}"] = outcomes["error"]
    return counts


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _family_rows(by_family: dict[str, list[Result]], families: Iterable[str]) -> list[str]:
    rows = ["| family | classes | built | compared | equal (a) | equal (b) | equal (c) |", "|---|---|---|---|---|---|---|"]
    for family in families:
        t = totals(by_family.get(family, []))
        rows.append(
            f"| {family} | {t['enumerated']} | {t['built']} | {t['compared']} | {t['equal_a']} | {t['equal_b']} "
            f"| {t['equal_c']} |"
        )
    return rows


def _stages(results: list[Result]) -> list[tuple[str, int]]:
    """How many classes stopped at each stage, most first."""
    return Counter(r.status for r in results if r.status != "compared").most_common()


def render(results: list[Result], *, versions: str, import_failures: dict[str, str], seconds: float) -> str:
    """The whole report, as Markdown."""
    t = totals(results)
    by_family: dict[str, list[Result]] = defaultdict(list)
    for result in results:
        by_family[result.family].append(result)
    n = t["enumerated"]
    lines = [
        "# Fidelity: yamltrace's captures against transformers' own",
        "",
        "Written by `make fidelity` (`tests/oracle/sweep/`); do not edit by hand. "
        f"{versions}; {seconds / 60:.1f} min.",
        "",
        "Every concrete model class in transformers that records outputs (a non-empty `_can_record_outputs`, own or",
        "inherited, or a `forward` under transformers' `capture_outputs`) is built as a tiny random model (generic",
        "config shrinking plus per-family overrides, eager attention, eval mode, fixed seed) and run once with every",
        "flag of its map on. That output is the reference; each variant must give `torch.equal` tensors for every",
        "key the reference returns:",
        "",
        *(f"- **{v}**: {VARIANT_NAMES[v]}" for v in VARIANTS),
        "",
        "Run it with `make fidelity`, or for some families "
        "`PYTHONPATH=tests python -m oracle.sweep --families llama,bert --out /tmp/f.md` (`--json` writes the raw",
        "results). Config shrinking and the per-family overrides are in `tests/oracle/sweep/_configs.py`, inputs in",
        "`_inputs.py`; the popular families also run in the default suite (`tests/oracle/test_sweep_popular.py`).",
        f"Models that fail at the small sizes are retried with only their layer counts lowered: "
        f"{sum(r.level == 'layers' and r.status == 'compared' for r in results)} of the compared classes were built that way.",
        "",
        "## Totals",
        "",
        "| | classes | % of enumerated |",
        "|---|---|---|",
        f"| enumerated | {n} | 100% |",
        f"| built (model constructed) | {t['built']} | {_percent(t['built'], n)} |",
        f"| ran (reference forward) | {t['ran']} | {_percent(t['ran'], n)} |",
        f"| compared | {t['compared']} | {_percent(t['compared'], n)} |",
        *(
            f"| equal, variant {v} | {t[f'equal_{v}']} | {_percent(t[f'equal_{v}'], n)} "
            f"({_percent(t[f'equal_{v}'], t['compared'])} of compared; {t[f'differs_{v}']} differ, "
            f"{t[f'error_{v}']} errors) |"
            for v in VARIANTS
        ),
        "",
        "## Popular families",
        "",
        *_family_rows(by_family, POPULAR),
        "",
        "## Every family",
        "",
        *_family_rows(by_family, sorted(by_family)),
        "",
        "## Compared but not equal",
        "",
        "The first difference per variant (`key[index]`: what differs; *error*: the variant raised).",
        "",
        "| class | variant | result |",
        "|---|---|---|",
    ]
    for result in results:
        for variant, outcome in result.variants.items():
            if outcome != "equal":
                lines.append(f"| {result.target} | {variant} | {_cell(outcome)} |")
    lines += [
        "",
        "## Not compared",
        "",
        "Stage that failed: `config` (tiny config), `model` (construction), `inputs`, `forward` (the reference",
        "forward), `no-output` (the model's own output returns none of its map's keys), `timeout`, `crash`.",
        "",
        "| stage | classes |",
        "|---|---|",
        *(f"| {stage} | {count} |" for stage, count in _stages(results)),
        "",
        "| class | stage | reason |",
        "|---|---|---|",
    ]
    for result in results:
        if result.status != "compared":
            lines.append(f"| {result.target} | {result.status} | {_cell(result.reason)} |")
    if import_failures:
        lines += ["", "## Modules that could not be imported", "", "| module | reason |", "|---|---|"]
        lines += [f"| {module} | {_cell(reason)} |" for module, reason in sorted(import_failures.items())]
    return "\n".join(lines) + "\n"
