"""spark_integration.register() without PySpark names the extra to install."""

from __future__ import annotations

import sys

import pytest

import spark_integration
from hashring.errors import ConfigurationError


def test_register_without_pyspark_names_the_spark_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "pyspark" or m.startswith("pyspark.")
                 or m == "spark_integration.source"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyspark", None)  # "import pyspark" now raises ImportError
    with pytest.raises(ConfigurationError, match=r"pip install 'kinesis-hashring\[spark\]'"):
        spark_integration.register(object())
