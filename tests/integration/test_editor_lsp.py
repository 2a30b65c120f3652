"""The schema as an editor sees it: yaml-language-server 2.0.0 (installed by `make lsp`, which
`make test` runs) driven over LSP on stdio, with the schema found offline (a `$schema=` modeline
naming a file, or the `yaml.schemas` setting naming `yamltrace schema --path`). A valid spec gets no
diagnostic; broken ones get yamltrace's own messages, readable, at their lines."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT

from yamltrace.cli import main
from yamltrace.spec import SCHEMA_FILE, schema_path

SERVER = ROOT / ".cache" / "lsp" / "node_modules" / "yaml-language-server" / "bin" / "yaml-language-server"


class Server:
    """A yaml-language-server process and the JSON-RPC messages it sends, read on a thread."""

    def __init__(self, settings: dict[str, Any]) -> None:
        node = shutil.which("node")
        if node is None or not SERVER.is_file():
            pytest.fail(f"yaml-language-server is not installed ({SERVER}): run `make lsp` (needs node and npm)")
        self.settings = settings
        self.process = subprocess.Popen([node, str(SERVER), "--stdio"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._id = 0

    def _read(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        while True:
            headers = {}
            while (line := stream.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("ascii").partition(":")
                headers[name.strip().lower()] = value.strip()
            if not line:
                return  # the server exited
            self.messages.put(json.loads(stream.read(int(headers["content-length"]))))

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        assert self.process.stdin is not None
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        self.process.stdin.flush()

    def wait_for(self, wanted: Any) -> dict[str, Any]:
        """The next message `wanted` accepts, answering the server's configuration requests meanwhile."""
        while True:
            message = self.messages.get(timeout=60)
            if message.get("method") == "workspace/configuration":
                items = message["params"]["items"]
                self.send({"id": message["id"], "result": [self.settings.get(i.get("section"), None) for i in items]})
            elif wanted(message):
                return message

    def start(self) -> None:
        self._id += 1
        capabilities = {"workspace": {"configuration": True}, "textDocument": {"publishDiagnostics": {}}}
        self.send(
            {
                "id": self._id,
                "method": "initialize",
                "params": {"processId": os.getpid(), "rootUri": None, "capabilities": capabilities},
            }
        )
        self.wait_for(lambda m: m.get("id") == self._id)
        self.send({"method": "initialized", "params": {}})
        self.send({"method": "workspace/didChangeConfiguration", "params": {"settings": self.settings}})

    def diagnostics(self, path: Path) -> list[tuple[int, str]]:
        """(line, message) of each diagnostic the server publishes for `path` once opened, in line order."""
        uri = path.resolve().as_uri()
        document = {"uri": uri, "languageId": "yaml", "version": 1, "text": path.read_text(encoding="utf-8")}
        self.send({"method": "textDocument/didOpen", "params": {"textDocument": document}})
        published = self.wait_for(lambda m: m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri)
        return sorted((d["range"]["start"]["line"] + 1, d["message"]) for d in published["params"]["diagnostics"])

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture
def server():
    def start(settings: dict[str, Any]) -> Server:
        started.append(Server(settings))
        started[-1].start()
        return started[-1]

    started: list[Server] = []
    yield start
    for s in started:
        s.close()


MODELINE = f"# yaml-language-server: $schema={SCHEMA_FILE}\n"
SETTINGS = {"yaml": {"validate": True, "schemaStore": {"enable": False}}}


def test_a_valid_spec_has_no_diagnostics_and_broken_ones_read_as_yamltrace_says(tmp_path: Path, server) -> None:
    assert main(["schema", "--output", str(tmp_path / SCHEMA_FILE)]) == 0
    files = {
        "valid.yaml": MODELINE + (ROOT / "specs" / "tiny.yaml").read_text(encoding="utf-8").split("\n", 1)[1],
        "version.yaml": MODELINE + "yamltrace: 2\noutputs:\n  hidden_states: X\nbogus: 1\n",
        "recorder.yaml": MODELINE
        + "yamltrace: 1\noutputs:\n  a: {target: X, to: gpu}\n  b: {target: X, class_name: y}\n  c: {target: X, idx: 0}\n",
        "edit.yaml": MODELINE
        + "yamltrace: 1\noutputs:\n  k: {target: X, input: 0, index: 1}\n  p: {target: X, positions: 'a:b'}\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    lsp = server(SETTINGS)
    assert lsp.diagnostics(tmp_path / "valid.yaml") == []
    assert lsp.diagnostics(tmp_path / "version.yaml") == [
        (2, "unsupported format version; this yamltrace reads 'yamltrace: 1'"),
        (5, "Property bogus is not allowed."),
    ]
    assert lsp.diagnostics(tmp_path / "recorder.yaml") == [
        (4, "not a device; write cpu, cuda, cuda:N or mps"),
        (5, "give exactly one of 'target' (a class) or 'class_name' (a module path suffix)"),
        (6, "Property idx is not allowed."),
    ]
    assert lsp.diagnostics(tmp_path / "edit.yaml") == [
        (4, "give either 'input' (record an argument) or 'index' (record an output element), not both"),
        (
            5,
            "not a slice, nor last or first; write last or first (each row's last or first real token), or a slice like '-8:', ':4' or '0:10:2'",
        ),
    ]


def test_the_installed_schema_by_setting_finds_a_missing_version(tmp_path: Path, server) -> None:
    (tmp_path / "spec.yaml").write_text("outputs:\n  hidden_states: X\n", encoding="utf-8")
    lsp = server({"yaml": {**SETTINGS["yaml"], "schemas": {schema_path(): "*.yaml"}}})
    assert lsp.diagnostics(tmp_path / "spec.yaml") == [(1, "missing the format version: add 'yamltrace: 1'")]
