"""Fail fast when Spark's Python workers cannot import this package.

Spark runs the data source in separate Python worker processes, started with
``PYSPARK_PYTHON`` (default ``python3`` from ``PATH``), not with the driver's interpreter. They
unpickle :class:`~spark_integration.source.KinesisDataSource` and its readers by importing
``spark_integration``; when that interpreter lacks the package the query dies inside Spark with
``ModuleNotFoundError: No module named 'spark_integration'`` and no hint. On a local master the
workers run on this machine, so :func:`check_worker_python` tries the import with their
interpreter first and raises an error naming ``PYSPARK_PYTHON``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Any

from kinesis.errors import ConfigurationError

_PROBE = "import spark_integration.options, pyarrow"


def worker_python(spark: Any) -> tuple[str, str] | None:
    """(interpreter of the Python workers, master), or None without a classic SparkContext."""
    try:
        context = spark.sparkContext
        return str(context.pythonExec), str(context.master)
    except Exception:  # Spark Connect has no SparkContext in this process
        return None


def check_worker_python(spark: Any, *, timeout: float = 60.0) -> None:
    """Raise :class:`ConfigurationError` if local Python workers cannot import this package.

    Checks only local masters (``local``, ``local[N]``): on a cluster the workers' interpreter
    lives on other machines. Costs one short subprocess when that interpreter is not this one.
    """
    found = worker_python(spark)
    if found is None:
        return
    python, master = found
    if not master.startswith("local"):
        return
    fix = (f"set PYSPARK_PYTHON={sys.executable} (the driver's interpreter, which has "
           "kinesis-hashring[spark]) before creating the SparkSession, or install "
           f"'kinesis-hashring[spark]' into {python}")
    resolved = shutil.which(python)
    if resolved is None:
        raise ConfigurationError(
            f"Spark's Python workers would run {python!r} (PYSPARK_PYTHON), which is not found: {fix}"
        )
    if os.path.abspath(resolved) == os.path.abspath(sys.executable):
        return
    try:
        probe = subprocess.run([resolved, "-c", _PROBE], capture_output=True, text=True,
                               timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return  # cannot tell: let Spark report what happens
    if probe.returncode != 0:
        reason = (probe.stderr.strip().splitlines() or ["import failed"])[-1]
        raise ConfigurationError(
            f"Spark's Python workers run {resolved} (PYSPARK_PYTHON), which cannot import the "
            f"kinesis source ({reason}): {fix}"
        )
