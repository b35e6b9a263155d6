"""What every benchmark writes: its JSON result file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any


def write_json(path: Path, data: dict[str, Any]) -> Path:
    """Write ``data`` to ``path`` (creating its folder), indented, with a final newline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def case_in_subprocess(script: str, case: str, cwd: Path) -> dict[str, Any]:
    """Run ``script --case CASE`` in a fresh interpreter (its peak RSS is the case's own) and
    return the JSON object its last output line holds."""
    done = subprocess.run([sys.executable, script, "--case", case], capture_output=True, text=True,
                          check=True, cwd=cwd)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
