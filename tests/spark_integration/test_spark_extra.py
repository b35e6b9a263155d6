"""spark_integration.register() without PySpark names the extra to install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


# --- Spark's Python workers (PYSPARK_PYTHON) -----------------------------------------------


def _python_without_the_package(tmp_path: Path) -> str:
    """An interpreter that cannot import this package (the system Python, isolated mode)."""
    script = tmp_path / "python-without-kinesis-hashring"
    script.write_text(f"#!/bin/sh\nexec {sys.base_prefix}/bin/python3 -I \"$@\"\n")
    script.chmod(0o755)
    return str(script)


class _Context:
    def __init__(self, python: str, master: str = "local[2]"):
        self.pythonExec, self.master = python, master


class _Session:
    def __init__(self, python: str, master: str = "local[2]"):
        self.sparkContext = _Context(python, master)


def test_workers_that_cannot_import_the_package_are_named_with_pyspark_python(tmp_path: Path) -> None:
    from spark_integration.worker_python import check_worker_python

    python = _python_without_the_package(tmp_path)
    with pytest.raises(ConfigurationError) as info:
        check_worker_python(_Session(python))
    message = str(info.value)
    assert "PYSPARK_PYTHON" in message and f"PYSPARK_PYTHON={sys.executable}" in message
    assert "No module named" in message and python in message
    with pytest.raises(ConfigurationError, match=r"'no-such-python' \(PYSPARK_PYTHON\), which is not found"):
        check_worker_python(_Session("no-such-python"))


def test_workers_that_can_import_it_or_run_elsewhere_pass(tmp_path: Path) -> None:
    from spark_integration.worker_python import check_worker_python

    check_worker_python(_Session(sys.executable))  # the driver's own interpreter: no probe
    check_worker_python(_Session(_python_without_the_package(tmp_path), "yarn"))  # not checkable
    check_worker_python(object())  # Spark Connect: no SparkContext


@pytest.mark.slow
def test_a_real_session_with_the_wrong_pyspark_python_fails_at_register(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    code = (
        "import spark_integration\n"
        "from pyspark.sql import SparkSession\n"
        "spark = (SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false')\n"
        "         .config('spark.driver.bindAddress', '127.0.0.1').config('spark.driver.host', '127.0.0.1')\n"
        "         .getOrCreate())\n"
        "try:\n"
        "    spark_integration.register(spark)\n"
        "except Exception as exc:\n"
        "    print('REFUSED', type(exc).__name__, exc)\n"
        "finally:\n"
        "    spark.stop()\n"
    )
    env = {**os.environ, "PYSPARK_PYTHON": _python_without_the_package(tmp_path),
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=240).stdout
    assert "REFUSED ConfigurationError" in out and "PYSPARK_PYTHON=" in out, out
