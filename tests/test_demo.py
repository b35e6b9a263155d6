"""`make demo` end to end, in quick mode: a subprocess with its own embedded AWS and member
processes, no terminal (rich degrades to plain lines)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def test_demo_quick_runs_end_to_end_and_audits_clean(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "200", "KINESIS_DEMO_QUICK": "1"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py"), "--out-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=280, env=env, cwd=str(ROOT),
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-4000:]
    assert "DEMO OK" in out

    def value(check: str) -> str:
        match = re.search(rf"│ {re.escape(check)}\s*│\s*(.*?)\s*│", out)
        assert match, f"no row {check!r} in:\n{out[-3000:]}"
        return match.group(1)

    assert value("lost") == "0"
    assert value("duplicates from graceful hand-offs") == "0"
    assert value("two members on one shard at once") == "0"
    assert int(value("records produced")) > 500
    assert value("records processed (distinct)") == value("records produced")
    assert int(value("graceful hand-offs")) > 0 and int(value("takeovers (after the SIGKILL)")) > 0
    # every member left a ledger, and the SIGKILLed one never wrote its final status
    ledgers = sorted(p.stem for p in tmp_path.glob("*.ledger"))
    assert ledgers == ["member-1", "member-2", "member-3", "member-4"]
    assert "exit_clean" not in (tmp_path / "member-2.status.json").read_text()
    assert '"exit_clean": true' in (tmp_path / "member-3.status.json").read_text()
