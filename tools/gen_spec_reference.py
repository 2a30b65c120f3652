"""Write docs/spec-reference.md from the spec JSON Schema: every key, its type, default and examples.

    python tools/gen_spec_reference.py           # rewrite docs/spec-reference.md
    python tools/gen_spec_reference.py --check   # exit 1 when the committed page differs

The schema is the single source: titles, descriptions, types, constraints and `examples` come from
it. A default is the schema's `default` keyword when present, else the phrase its description gives
("Default X", "Omitted: X"). Needs only the standard library; imports nothing from yamltrace.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "yamltrace" / "schemas" / "yamltrace-spec-v1.schema.json"
PAGE = ROOT / "docs" / "spec-reference.md"

_PLAIN = re.compile(r"^[A-Za-z_./][A-Za-z0-9_.:/\-]*$")
_NOT_PLAIN = {"true", "false", "null", "yes", "no", "on", "off", "y", "n", "~"}
_DEFAULT = re.compile(r"\b(?:Default|Omitted)(?::)?\s+(?P<value>.+?)(?:;|\.(?:\s|$)|$)")


def flow(value: Any) -> str:
    """A value in YAML flow style, as one would write it in a spec."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, str):
        return value if _PLAIN.match(value) and value.lower() not in _NOT_PLAIN else json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    return "{" + ", ".join(f"{flow(k)}: {flow(v)}" for k, v in value.items()) + "}"


def anchor(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def with_rules(node: dict[str, Any]) -> dict[str, Any]:
    """`node` with the keywords of its rule parts merged in: an `allOf` part without `if` / `$ref` holds
    one keyword and the `errorMessage` editors show for it (`{"minimum": 0, "errorMessage": ...}`)."""
    out = dict(node)
    for part in node.get("allOf", []):
        if isinstance(part, dict) and "if" not in part and "$ref" not in part:
            for key, value in part.items():
                if key == "required":
                    out["required"] = [*out.get("required", []), *value]
                elif key != "errorMessage":
                    out.setdefault(key, value)
    return out


class Reference:
    """Renders the schema; `defs` are the `$defs`, linked by anchor wherever a `$ref` points."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self.defs: dict[str, Any] = schema.get("$defs", {})
        self.lines: list[str] = []

    def ref(self, node: dict[str, Any]) -> str | None:
        target = node.get("$ref", "")
        name = target.removeprefix("#/$defs/")
        return name if target.startswith("#/$defs/") and "/" not in name else None

    def deref(self, node: dict[str, Any]) -> dict[str, Any]:
        """A property written as a `$ref` to another mapping's property (`#/$defs/X/properties/Y`): that
        property, with the keywords written beside the `$ref` (a description of its own) over it."""
        target = node.get("$ref", "")
        if not target.startswith("#/$defs/") or self.ref(node):
            return node
        found: Any = self.schema
        for part in target.removeprefix("#/").split("/"):
            found = found[part]
        return {**found, **{k: v for k, v in node.items() if k != "$ref"}}

    def rules(self, node: dict[str, Any]) -> list[str]:
        """The messages of a mapping's oneOf / anyOf rules: its own, those of the rule defs and `then` parts of its allOf."""
        found = []
        for part in [node, *node.get("allOf", [])]:
            part = self.defs.get(self.ref(part) or "", part)
            for holder in (part, part.get("then", {})):
                for keyword in ("oneOf", "anyOf"):
                    shared = {alt.get("errorMessage") for alt in holder.get(keyword, []) if isinstance(alt, dict)}
                    message = holder.get("errorMessage") or (shared.pop() if len(shared) == 1 else None)
                    if holder.get(keyword) and isinstance(message, str):
                        found.append(message)
        return found

    def link(self, name: str) -> str:
        title = self.defs[name].get("title", name)
        return f"[{title.lower()}](#{anchor('type-' + name)})"

    def type_of(self, node: dict[str, Any], section: str | None = None) -> str:
        """The type of a node in words, with links to the value types it refers to."""
        name = self.ref(node)
        if name:
            return self.link(name)
        if "const" in node:
            return f"`{flow(node['const'])}`"
        if "enum" in node:
            return "one of " + ", ".join(f"`{flow(v)}`" for v in node["enum"])
        kinds = node.get("type")
        kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
        words = []
        for kind in kinds:
            if kind == "object" and section:
                words.append(f"mapping ([its keys](#{section}))")
            elif kind == "object" and "additionalProperties" in node and node["additionalProperties"] is not False:
                words.append(f"mapping of text to {self.type_of(node['additionalProperties'])}")
            elif kind == "array" and isinstance(node.get("items"), dict):
                words.append(f"list of {self.type_of(node['items'])}")
            else:
                words.append({"string": "text", "object": "mapping", "array": "list"}.get(kind, kind))
        for part in node.get("allOf", []):  # the union types spell their alternatives as if/then
            then = part.get("then", {})
            if self.ref(then):
                words.append(self.link(self.ref(then)))
            elif then.get("items"):
                words.append(f"non-empty list of {self.type_of(then['items'])}")
        if any("then" in part for part in node.get("allOf", [])):
            words = [w for w in words if w not in ("text", "mapping", "list")]
        return " or ".join(words) or "any"

    def constraints(self, node: dict[str, Any]) -> list[str]:
        node = with_rules(node)
        out = []
        if "pattern" in node:
            out.append(f"text matching `{node['pattern']}`")
        if "minimum" in node:
            out.append(f"integer at least {node['minimum']}")
        if node.get("minItems"):
            out.append(f"at least {node['minItems']} item(s)")
        if node.get("uniqueItems"):
            out.append("no repeated items")
        if node.get("minLength"):
            out.append("not empty")
        names = node.get("propertyNames", {})
        if "pattern" in names:
            out.append(f"keys matching `{names['pattern']}`")
        elif names.get("minLength"):
            out.append("keys not empty")
        if node.get("additionalProperties") is False and "properties" in node:
            out.append("no other keys")
        return out

    @staticmethod
    def default(node: dict[str, Any]) -> str | None:
        if "default" in node:
            return f"`{flow(node['default'])}`"
        found = _DEFAULT.search(node.get("description", ""))
        return found.group("value").strip() if found else None

    def key(self, section: str, name: str, node: dict[str, Any], required: bool) -> None:
        """One key of a mapping: heading, title, description, then type, default, examples."""
        nested = f"{section}-{anchor(name)}-keys" if "properties" in node else None
        self.lines += [f'<a id="{section}-{anchor(name)}"></a>', f"### `{name}`", ""]
        title = node.get("title")
        self.lines += [f"**{title}.** {node.get('description', '')}".strip(), ""]
        self.lines.append(f"- type: {self.type_of(node, nested)}")
        self.lines.append("- required" if required else "- optional")
        default = self.default(node)
        if default:
            self.lines.append(f"- default: {default}")
        self.lines += [f"- {c}" for c in self.constraints(node) if not ("properties" in node and c == "no other keys")]
        examples = node.get("examples") or self.defs.get(self.ref(node) or "", {}).get("examples", [])
        if examples:
            self.lines.append("- examples: " + ", ".join(f"`{name}: {flow(e)}`" for e in examples))
        self.lines.append("")
        if nested:
            self.mapping(nested, f"Keys of `{name}`", node)

    def mapping(self, section: str, heading: str, node: dict[str, Any], intro: str = "") -> None:
        """A mapping's summary table, then each of its keys."""
        self.lines += [f'<a id="{section}"></a>', f"## {heading}", ""]
        if intro:
            self.lines += [intro, ""]
        required = set(with_rules(node).get("required", []))
        self.lines += ["| key | type | required | default |", "|---|---|---|---|"]
        for name, prop in node["properties"].items():
            prop = self.deref(prop)
            nested = f"{section}-{anchor(name)}-keys" if "properties" in prop else None
            cells = [
                f"[`{name}`](#{section}-{anchor(name)})",
                self.type_of(prop, nested),
                "yes" if name in required else "no",
                self.default(prop) or "—",
            ]
            self.lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        self.lines.append("")
        for rule in self.rules(node):
            self.lines += [f"Rule: {rule}.", ""]
        for name, prop in node["properties"].items():
            self.key(section, name, self.deref(prop), name in required)

    def value_type(self, name: str, node: dict[str, Any]) -> None:
        self.lines += [f'<a id="{anchor("type-" + name)}"></a>', f"### {node.get('title', name)}", ""]
        self.lines += [node.get("description", ""), ""]
        if "properties" in node:
            self.lines.append(f"- a mapping: [its keys](#{anchor('keys-' + name)})")
        else:
            self.lines.append(f"- type: {self.type_of(node)}")
            self.lines += [f"- {c}" for c in self.constraints(node)]
        if node.get("examples"):
            self.lines.append("- examples: " + ", ".join(f"`{flow(e)}`" for e in node["examples"]))
        self.lines.append("")

    def render(self) -> str:
        s = self.schema
        self.lines = [
            "# Spec reference",
            "",
            "<!-- Generated by tools/gen_spec_reference.py from yamltrace/schemas/yamltrace-spec-v1.schema.json;"
            " do not edit: change the schema and run the script. -->",
            "",
            f"{s.get('title', 'Spec')} (`{s.get('$id', '')}`). {s.get('description', '')} Every key of every",
            "mapping is listed below; a mapping rejects keys it does not list. The prose, the error",
            "format and the safety rules are in [spec-format.md](spec-format.md); the editor setup in",
            "[cli.md](cli.md#editors-the-schema-as-a-file).",
            "",
        ]
        for example in s.get("examples", []):
            self.lines += ["```yaml", *[f"{k}: {flow(v)}" for k, v in example.items()], "```", ""]
        self.mapping("top-level", "Top level", s)
        for name, node in self.defs.items():
            if "properties" in node:
                self.mapping(anchor("keys-" + name), f"{node.get('title', name)}", node, node.get("description", ""))
        self.lines += ['<a id="value-types"></a>', "## Value types", ""]
        for name, node in self.defs.items():
            if "type" in node or "properties" in node:  # a def of rules alone is shown as the rules of its mappings
                self.value_type(name, node)
        return "\n".join(self.lines).rstrip("\n") + "\n"


def generate(schema_path: Path = SCHEMA) -> str:
    return Reference(json.loads(schema_path.read_text(encoding="utf-8"))).render()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/spec-reference.md is not up to date")
    args = parser.parse_args(argv)
    text = generate()
    if args.check:
        if PAGE.read_text(encoding="utf-8") != text:
            sys.stderr.write(f"{PAGE} is stale: run python tools/gen_spec_reference.py\n")
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
