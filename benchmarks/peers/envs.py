"""The peers' pinned versions (set in pyproject.toml's ``peer-*`` extras) and their environments.

Each peer gets its own virtual environment under ``benchmarks/peers/.venvs/<peer>``
(gitignored), built from PyPI with ``python -m venv``, ``pip install -U pip setuptools
wheel`` and ``pip install <pin>``. A marker file holds the pin it was built for, so a
changed pin rebuilds it.

    python -m benchmarks.peers.envs            # build (or check) every peer environment
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENVS = HERE / ".venvs"

PEERS = ("kcl-rs", "async-kinesis", "azure-eventhub")


def _pins() -> dict[str, str]:
    """Peer -> pip requirement, from pyproject.toml's ``peer-<name>`` extras."""
    extras = tomllib.loads((HERE.parents[1] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return {peer: extras[f"peer-{peer}"][0] for peer in PEERS}


PINS: dict[str, str] = _pins()
"""Peer -> pip requirement. ``async-kinesis``'s DynamoDB checkpointer needs its ``dynamodb``
extra (aioboto3)."""

DISTRIBUTIONS = {"kcl-rs": "kcl-rs", "async-kinesis": "async-kinesis", "azure-eventhub": "azure-eventhub"}


def python_of(peer: str) -> Path:
    return VENVS / peer / "bin" / "python"


def ensure(peer: str, *, base_python: str | None = None, quiet: bool = True) -> Path:
    """The peer's interpreter, building its environment first if missing or stale."""
    pin = PINS[peer]
    venv = VENVS / peer
    marker = venv / ".installed"
    if marker.exists() and marker.read_text().strip() == pin and python_of(peer).exists():
        return python_of(peer)
    if venv.exists():
        shutil.rmtree(venv)
    VENVS.mkdir(parents=True, exist_ok=True)
    q = ["-q"] if quiet else []
    subprocess.run([base_python or sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(python_of(peer))
    subprocess.run([py, "-m", "pip", "install", *q, "-U", "pip", "setuptools", "wheel"], check=True)
    subprocess.run([py, "-m", "pip", "install", *q, pin], check=True)
    marker.write_text(pin + "\n")
    return python_of(peer)


def installed_versions(peer: str) -> dict[str, str]:
    """``pip freeze`` of the peer's environment, as {distribution: version}."""
    out = subprocess.run([str(python_of(peer)), "-m", "pip", "freeze"], capture_output=True, text=True,
                         check=True).stdout
    versions = {}
    for line in out.splitlines():
        name, sep, version = line.partition("==")
        if sep:
            versions[name.lower()] = version
    return versions


def main() -> int:
    for peer in PINS:
        print(f"{peer}: {ensure(peer, quiet=False)} ({PINS[peer]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
