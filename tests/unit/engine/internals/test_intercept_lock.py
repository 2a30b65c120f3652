"""The interception lock and the garbage collector: a collected model's finalizer (which releases its
held hooks) may run while this thread holds the lock, and must not take it (the lock is private to
`engine._intercept`, so this test names it)."""

from __future__ import annotations

import pytest


@pytest.mark.slow  # a child process under a timeout
def test_a_collection_during_hook_installation_does_not_deadlock(tmp_path) -> None:
    """The garbage collector may run a collected model's finalizer while this thread installs hooks
    (holding the interception lock): the finalizer must not take that lock."""
    import subprocess
    import sys

    script = tmp_path / "collect_while_installing.py"
    script.write_text(
        "import gc, torch, weakref\n"
        "from yamltrace.engine import _intercept\n"
        "from yamltrace.examples.tiny import TinyConfig, TinyModel\n"
        "ids = torch.randint(0, 128, (1, 5))\n"
        "model = TinyModel(TinyConfig(num_hidden_layers=2)).eval()\n"
        "model(ids, output_hidden_states=True)  # its hooks are held\n"
        "ref = weakref.ref(model)\n"
        "with _intercept._lock:  # as inside intercept(), where an allocation may run the collector\n"
        "    del model\n"
        "    gc.collect()\n"
        "other = TinyModel(TinyConfig(num_hidden_layers=2)).eval()\n"
        "other(ids, output_hidden_states=True)\n"
        "print('ok' if ref() is None else 'alive')\n",
        encoding="utf-8",
    )
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)  # a deadlock times out
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
