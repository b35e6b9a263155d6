"""Where the repository is, for tests in any folder under tests/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root (the folder holding pyproject.toml)."""
