"""Figures for docs/security.md: each hostile input run in a fresh process, with its time and peak memory.

Run from the repository root: `python tests/benchmarks/security_figures.py [CASE ...]`. Each case runs in
a subprocess with a wall-clock limit (`--limit`, default 30 s) and prints
`case | outcome | wall s | CPU s | peak RSS growth MB | message size` (the growth is the process's peak RSS
minus its RSS just before the case ran, so torch's own ~220 MB is left out). Not part of the test suite: the numbers depend on
the machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap

PRELUDE = r"""
import os, resource, sys, tempfile, time
sys.setrecursionlimit(1000)
from yamltrace.errors import SpecError
from yamltrace.spec import load_spec, validate_spec
tmp = tempfile.mkdtemp()
def write(name, text):
    path = os.path.join(tmp, name)
    with open(path, 'w', encoding='utf-8') as f:
        f.write(text)
    return path
def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
def status_mb(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024
def recorder_yaml(i, items=3):
    layers = ", ".join(map(str, range(items)))
    return (f"  k{i}: {{class_name: .layers.{i}.mlp, index: 1, layer_name: layers, detach: true, to: cpu, "
            f"dtype: float16, num_hidden_layers_key: n_layer, capture_initial_hidden_state: false, layers: [{layers}]}}\n")
from yamltrace.spec._limits import DEFAULT_MAX_BYTES, MAX_NODES, MAX_RECORDERS
def largest_accepted(budget_nodes=MAX_NODES, budget_bytes=DEFAULT_MAX_BYTES, recorders=MAX_RECORDERS):
    # MAX_RECORDERS recorders with every field; their `layers` lists take the rest of the node budget.
    # 5 nodes around the outputs; per recorder: its key and mapping, 2 per field, and its list items
    items = min(max((budget_nodes - 5) // recorders - 20, 1), 1000)  # MAX_LIST_ITEMS
    text = "yamltrace: 1\noutputs:\n"
    for i in range(recorders):
        more = recorder_yaml(i, items)
        if len(text) + len(more) > budget_bytes:
            break
        text += more
    return text
"""

# Each case: setup code, then a statement whose outcome is measured (`run()`).
CASES: dict[str, str] = {
    "1-main-import": """
def run(): return load_spec("yamltrace: 1\\nimports: [yamltrace.__main__]\\noutputs: {}\\n")
""",
    "3-redos-from-spec": """
import torch
from yamltrace.patch import patch_model
class AAAAAAAAAAAAAAAAAAAAAAAAAAAAAB(torch.nn.Module): pass
model = torch.nn.Sequential(AAAAAAAAAAAAAAAAAAAAAAAAAAAAAB())
def run():
    spec = load_spec("yamltrace: 1\\noutputs: {}\\npatches:\\n  '^((((\\\\w+)+)+)+)+!$': torch.nn:Identity\\n")
    with patch_model(model, spec): pass
""",
    "4-unique-items-8000": """
items = ", ".join(f"{i}, m{i}" for i in range(4000))
text = f"yamltrace: 1\\nimports: [{items}]\\n"
def run(): return validate_spec(text)
""",
    "5-extends-chain-200": """
long = "x" * 400
prev = None
for i in range(200):
    body = f"yamltrace: 1\\noutputs: {{k{i}_{long}: 1}}\\n"
    if prev: body = f"extends: {prev}\\n" + body
    prev = os.path.basename(write(f"s{i}_{'y' * 100}.yaml", body))
def run(): return validate_spec(os.path.join(tmp, prev))
""",
    "5-hint-work": """
imports = ", ".join(["torch.nn", "torch.nn.functional", "torch"] )
names = "\\n".join(f"  k{i}: NoSuchClass{i}xxxxxxxxxxxxxxxxxxxxxxxxx" for i in range(3000))
text = f"yamltrace: 1\\nimports: [{imports}]\\noutputs:\\n{names}\\n"
def run(): return load_spec(text)
""",
    "6-extends-1200": """
prev = None
for i in range(1200):
    body = "yamltrace: 1\\n" + (f"extends: {prev}\\n" if prev else "")
    prev = os.path.basename(write(f"s{i}.yaml", body))
def run(): return validate_spec(os.path.join(tmp, prev))
""",
    "7-extends-etc-passwd": """
def run(): return validate_spec(write("a.yaml", "yamltrace: 1\\nextends: /etc/passwd\\n"))
""",
    "8-patch-overflow": """
def run(): return load_spec("yamltrace: 1\\npatches:\\n  'a{4294967296}': torch.nn:Identity\\n")
""",
    "9-1mb-flow": """
text = "yamltrace: 1\\noutputs: {" + ", ".join(f"k{i}: [a, b]" for i in range(60000)) + "}\\n"
text = text[: (1 << 20) - 10] if len(text) > (1 << 20) else text
def run(): return validate_spec(text)
""",
    "9-50k-output-keys": """
text = "yamltrace: 1\\noutputs:\\n" + "".join(f"  k{i}: A\\n" for i in range(50000))
def run(): return validate_spec(text)
""",
    "10-dunder-layers-key": """
def run(): return load_spec("yamltrace: 1\\noutputs:\\n  h: {target: torch.nn:Linear, num_hidden_layers_key: __dict__}\\n")
""",
    "10-huge-index": """
def run(): return load_spec("yamltrace: 1\\noutputs:\\n  h: {target: torch.nn:Linear, index: " + "9" * 4000 + "}\\n")
""",
    "11-reserved-key": """
def run(): return load_spec("yamltrace: 1\\noutputs:\\n  to_tuple: torch.nn:Linear\\n")
""",
    "12-line-separator": """
def run(): return validate_spec("yamltrace: 1\\u2028outputs: {}\\n")
""",
    "14-version-float": """
def run(): return validate_spec("yamltrace: 1.0\\n")
""",
    "14-name-newline": """
def run(): return validate_spec({"yamltrace": 1, "imports": ["torch\\n"]})
""",
}

WORST = {
    "worst-accepted-recorders": """
text = largest_accepted()
def run(): return validate_spec(text)
""",
    "worst-accepted-load": """
text = largest_accepted()
def run(): return load_spec(text)
""",
    "worst-accepted-mapping": """
import yaml
data = yaml.safe_load(largest_accepted())
def run(): return validate_spec(data)
""",
    "worst-accepted-patch-keys": """
from yamltrace.spec._patterns import MAX_PATTERN_CHARS
key = lambda i: "^(((\\\\w+)+)+)+" + "(a|aa)*" * ((MAX_PATTERN_CHARS - 24) // 7) + f"{i}!$"
text = "yamltrace: 1\\npatches:\\n" + "".join(f"  '{key(i)}': torch.nn:Identity\\n" for i in range(128))
def run(): return validate_spec(text)
""",
    "refused-3000-unresolved-names": """
names = "".join(f"  k{i}: NoSuchClass{i}\\n" for i in range(3000))
text = f"yamltrace: 1\\nimports: [torch.nn, torch.nn.functional, torch]\\noutputs:\\n{names}"
def run(): return load_spec(text)
""",
    "worst-accepted-extends-16": """
prev = None
per_file = largest_accepted(MAX_NODES // 16, DEFAULT_MAX_BYTES // 16, MAX_RECORDERS // 16)
for i in range(16):
    body = per_file.replace("  k", f"  f{i}k")
    if prev: body = f"extends: {prev}\\n" + body
    prev = os.path.basename(write(f"s{i}.yaml", body))
def run(): return validate_spec(os.path.join(tmp, prev))
""",
    "largest-refused-bytes": """
text = largest_accepted(10**9) + "#" * 2
text = text + "#" * (256 * 1024 + 1 - len(text.encode()))
def run(): return validate_spec(text)
""",
    "largest-refused-nodes": """
text = "yamltrace: 1\\nimports: [" + ", ".join(["a"] * MAX_NODES) + "]\\n"
def run(): return validate_spec(text)
""",
    "largest-refused-max-bytes-1mib": """
text = "yamltrace: 1\\noutputs: {" + ", ".join(f"k{i}: [a, b]" for i in range(60000)) + "}\\n"
text = text[: (1 << 20) - 10]
def run(): return validate_spec(text, max_bytes=1 << 20)
""",
}
CASES.update(WORST)

RUNNER = """
before = status_mb("VmRSS")
t0, c0 = time.perf_counter(), time.process_time()
try:
    run()
    outcome, size = "accepted", 0
except SpecError as e:
    outcome, size = "SpecError", len(str(e))
except BaseException as e:
    outcome, size = type(e).__name__, len(str(e))
print("RESULT", __import__("json").dumps([outcome, time.perf_counter() - t0, time.process_time() - c0, status_mb("VmHWM") - before, size]))
"""


def run_case(name: str, limit: float) -> str:
    code = PRELUDE + textwrap.dedent(CASES[name]) + RUNNER
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return f"{name} | still running after {limit:.0f} s | - | - | -"
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        return f"{name} | process ended (exit {done.returncode}) | - | - | {done.stderr.strip()[-200:]!r}"
    outcome, seconds, cpu, rss, size = json.loads(lines[-1][7:])
    return f"{name} | {outcome} | {seconds:.3f} | {cpu:.3f} | {rss:.1f} | {size}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("cases", nargs="*", default=list(CASES))
    parser.add_argument("--limit", type=float, default=30.0)
    args = parser.parse_args()
    for name in args.cases:
        print(run_case(name, args.limit), flush=True)


if __name__ == "__main__":
    main()
