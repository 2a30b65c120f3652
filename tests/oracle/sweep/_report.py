"""Render sweep results as `docs/fidelity.md`: per transformers version, totals, per-family tables,
differences, exclusions."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable

from ._compare import VARIANT_NAMES, VARIANTS, Result
from ._enumerate import POPULAR

__all__ = ["totals", "render", "page"]

BUILT = ("inputs", "forward", "no-output", "compared")  # statuses reached after the model was constructed

# Why a compared class differs, where it was diagnosed (class -> cause; shown beside each difference).
# The class stays counted as differing: these are what its own output returns, not what its hooks record.
CAUSES: dict[str, str] = {
    **dict.fromkeys(
        (
            "bridgetower.BridgeTowerModel",
            "bridgetower.BridgeTowerForMaskedLM",
            "bridgetower.BridgeTowerForImageAndTextRetrieval",
            "bridgetower.BridgeTowerForContrastiveLearning",
        ),
        "BridgeTowerModel builds `hidden_states` by hand: (text, image, cross-modal) tuples its forward appends, "
        "not what its map's hooks record.",
    ),
    "groupvit.GroupViTModel": "the vision tower (GroupViTVisionTransformer: no capture decorator, empty map) collects "
    "its hidden states by hand (`all_hidden_states` in GroupViTVisionEncoder).",
    "swin.SwinBackbone": "returns the encoder's `reshaped_hidden_states` (captures taken before downsampling and "
    "reshaped by hand to batch, channels, height, width) as `hidden_states`.",
    "csm.CsmForConditionalGeneration": "naming: returns its backbone's captures under the plain names; its map's "
    "classes (CsmDecoderLayer, CsmAttention) are held by the backbone and the depth decoder, so no scope owns the "
    "plain names and trace prefixes them (`backbone_model_hidden_states`: equal).",
    "pocket_tts_audio_tokenizer.PocketTTSAudioTokenizerModel": "naming: returns its encoder's captures under the "
    "plain names; encoder and decoder both hook them and no owner rule singles one out, so trace prefixes both "
    "(`encoder_hidden_states`: equal).",
    "musicgen_melody.MusicgenMelodyForConditionalGeneration": "naming: returns its decoder's captures under the "
    "plain names; the text encoder and the decoder both hook them, so trace prefixes both "
    "(`decoder_hidden_states`: equal).",
    **dict.fromkeys(
        ("pp_ocrv5_mobile_rec.PPOCRV5MobileRecForTextRecognition", "pp_ocrv6_small_rec.PPOCRV6SmallRecForTextRecognition"),
        "naming: returns its backbone's captures as `hidden_states` and those of the blocks its own map names (the "
        "SVTR head encoder) as `head_hidden_states`; trace follows the map (`hidden_states` equal the "
        "`head_hidden_states`, `model_backbone_encoder_hidden_states` the `hidden_states`).",
    ),
    "pp_ocrv5_server_rec.PPOCRV5ServerRecForTextRecognition": "returns the HGNetV2 backbone's hidden states, "
    "collected by hand (no capture decorator), as `hidden_states`; its SVTR head encoder's captures "
    "(`head_hidden_states`) equal trace's `hidden_states`.",
    "pp_ocrv5_server_rec.PPOCRV5ServerRecModel": "its hidden states are the HGNetV2 backbone's, collected by hand; "
    "no module carries the capture decorator (variant c has nothing to re-decorate) and its map's blocks are not "
    "in the model.",
    **dict.fromkeys(
        ("blt.BltModel", "blt.BltForCausalLM", "chameleon.ChameleonModel", "chameleon.ChameleonForConditionalGeneration"),
        "variant b: a submodule declares its own map without a capture decorator (BLT's local encoder and global "
        "transformer, Chameleon's VQ-VAE), which switches its subtree to that map; a spec cannot express that, so "
        "`spec_from_model` refuses to export rather than write a spec that hooks other modules.",
    ),
    "moshi.MoshiForConditionalGeneration": "naming: its forward (no capture decorator) returns its decoder's "
    "inner model's captures under the plain names; that model is a scope of its own, so trace labels them "
    "(`model_hidden_states`: equal).",
    "clvp.ClvpModelForConditionalGeneration": "naming: returns the text encoder's captures as "
    "`text_encoder_hidden_states`; trace labels the decorated model inside it by its path "
    "(`text_encoder_model_hidden_states`: equal).",
    "llama4.Llama4ForConditionalGeneration": "**upstream** (transformers 5.24.0): its forward reads "
    "`outputs.image_outputs`, a field its output class (`MoeCausalLMOutputWithPast`) lacks, so the reference forward "
    "itself raises; nothing to compare.",
    **dict.fromkeys(
        (
            "inkling2_loop.Inkling2LoopModel",
            "inkling2_loop.Inkling2LoopTextModel",
            "inkling2_loop.Inkling2LoopForCausalLM",
            "inkling2_loop.Inkling2LoopForConditionalGeneration",
        ),
        "its map records `OutputRecorder(target_class=(4 classes))`, a tuple, which transformers accepts (isinstance) "
        "and yamltrace's `OutputRecorder` refuses until it takes several target classes.",
    ),
    "timesfm2_5.TimesFm2_5ModelForPrediction": "calls its base model twice per forward (the series and its "
    "negation: `force_flip_invariance`) and returns the first call's captures; trace keeps every call of a scope "
    "(2 x 3 hidden states).",
}


def totals(results: Iterable[Result]) -> dict[str, int]:
    """Counts over results: enumerated, built, ran, compared, and equal/differs/error per variant; how many
    compared classes were compared on nested maps' keys, on `<label>_<key>` fields, and with variant b
    exported from the instance."""
    results = list(results)
    counts = {"enumerated": len(results)}
    compared = [r for r in results if r.status == "compared"]
    counts["nested_map"] = sum(r.nested_map for r in compared)
    counts["prefixed"] = sum(r.prefixed for r in compared)
    counts["b_instance"] = sum(bool(r.b_export) for r in compared)
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


# Each version's section of the page lies between these markers, so a run under one transformers version
# replaces its own section and keeps the others.
BEGIN, END = "<!-- sweep: transformers {} -->", "<!-- /sweep -->"


def _intro() -> list[str]:
    return [
        "# Fidelity: yamltrace's captures against transformers' own",
        "",
        "Written by `make fidelity` / `make fidelity-<version>` (`tests/oracle/sweep/`); do not edit by hand. One",
        "section per transformers version of the test matrix (CONTRIBUTING.md), newest first; a run replaces the",
        "section of the version it ran under.",
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
        "`_inputs.py` (generic builders), `_parts.py` (parts of a model fed by their parent: DETR-style encoders and",
        "decoders, SAM parts) and `_class_inputs.py` (per-class layouts); the popular families also run in the",
        "default suite (`tests/oracle/test_sweep_popular.py`).",
        "Each model runs one warm-up forward before the reference: every variant runs after it, and some models change",
        "on their first forward (BigBird swaps its block-sparse attention for full attention on short inputs, after",
        "transformers has hooked the old modules). A difference whose cause is a bug of transformers itself is",
        "labelled **upstream**.",
    ]


def _totals_rows(t: dict[str, int]) -> list[str]:
    n = t["enumerated"]
    return [
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
    ]


def _notes(results: list[Result], t: dict[str, int]) -> list[str]:
    return [
        f"Models that fail at the small sizes are retried with only their layer counts lowered: "
        f"{sum(r.level == 'layers' and r.status == 'compared' for r in results)} of the compared classes were built that way.",
        f"{t['nested_map']} compared classes declare an empty map but carry the capture decorator (their encoder, decoder",
        "or base model records): they are compared on their nested models' keys. "
        f"{t['prefixed']} return some keys only as `<label>_<key>`",
        "fields (`encoder_hidden_states`, `decoder_attentions`): those are compared with the keys `trace` yields under the same names.",
        f"Variant b exported the spec from the swept instance (`spec_from_model(model)`) for {t['b_instance']} classes, whose",
        "default config does not build on the meta device (or whose first forward replaced modules), so that",
        "`spec_from_model(cls)` cannot see their structure; the others export from the class (see below).",
    ]


def render(results: list[Result], *, versions: str, import_failures: dict[str, str], seconds: float) -> str:
    """One transformers version's section of the report, as Markdown (between its markers)."""
    t = totals(results)
    by_family: dict[str, list[Result]] = defaultdict(list)
    for result in results:
        by_family[result.family].append(result)
    version = versions.split(",")[0].removeprefix("transformers ").strip()
    lines = [
        BEGIN.format(version),
        f"## transformers {version}",
        "",
        f"{versions}; {seconds / 60:.1f} min.",
        *_notes(results, t),
        "",
        f"### Totals (transformers {version})",
        "",
        *_totals_rows(t),
        "",
        "### Popular families",
        "",
        *_family_rows(by_family, POPULAR),
        "",
        "### Every family",
        "",
        *_family_rows(by_family, sorted(by_family)),
        "",
        "### Compared but not equal",
        "",
        'The first difference per variant (`key[index]`: what differs; *error*: the variant raised; "equal to',
        "trace's `name`\": another key `trace` yields holds exactly these values) and, where diagnosed, its cause.",
        "",
        "| class | variant | result | cause |",
        "|---|---|---|---|",
    ]
    for result in results:
        for variant, outcome in result.variants.items():
            if outcome != "equal":
                lines.append(f"| {result.target} | {variant} | {_cell(outcome)} | {_cell(CAUSES.get(result.target, ''))} |")
    return "\n".join(lines + _exclusions(results, import_failures) + [END]) + "\n"


def _exclusions(results: list[Result], import_failures: dict[str, str]) -> list[str]:
    """The sections after the differences: variant b from the instance, not compared, not imported."""
    instance = [r for r in results if r.status == "compared" and r.b_export]
    lines = [
        "",
        "### Variant b exported from the instance",
        "",
        "`spec_from_model(cls)` builds the class from its default config on the meta device; where that fails",
        "(transformers ships some defaults with `None` fields the model needs) or the model replaced modules on its",
        "first forward, variant b exports from the swept instance instead (`spec_from_model(model)`).",
        "",
        "| class | why not from the class |",
        "|---|---|",
        *(f"| {r.target} | {_cell(r.b_export)} |" for r in instance),
        "",
        "### Not compared",
        "",
        "Stage that failed: `config` (tiny config), `model` (construction), `inputs`, `forward` (the reference",
        "forward), `no-output` (the model's own output returns none of its map's keys), `timeout`, `crash`.",
        "",
        "| stage | classes |",
        "|---|---|",
        *(f"| {stage} | {count} |" for stage, count in _stages(results)),
        "",
        "| class | stage | reason | cause |",
        "|---|---|---|---|",
    ]
    for result in results:
        if result.status != "compared":
            cause = CAUSES.get(result.target, "")
            lines.append(f"| {result.target} | {result.status} | {_cell(result.reason)} | {_cell(cause)} |")
    if import_failures:
        lines += ["", "### Modules that could not be imported", "", "| module | reason |", "|---|---|"]
        lines += [f"| {module} | {_cell(reason)} |" for module, reason in sorted(import_failures.items())]
    return lines


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))


def page(section: str, existing: str = "") -> str:
    """The whole page: the introduction, then `section` and the other versions' sections of `existing`
    (a page this function wrote before), newest version first."""
    pattern = r"<!-- sweep: transformers (\S+) -->\n.*?<!-- /sweep -->\n"
    sections = {m.group(1): m.group(0) for m in re.finditer(pattern, existing, flags=re.S)}
    own = re.match(r"<!-- sweep: transformers (\S+) -->", section)
    assert own, "a section starts with its marker"
    sections[own.group(1)] = section
    ordered = [sections[v] for v in sorted(sections, key=_version_key, reverse=True)]
    return "\n".join(_intro()) + "\n\n" + "\n".join(ordered)
