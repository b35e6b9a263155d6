"""A local SparkSession for demos, tests and benchmarks, with the ``kinesis`` source registered."""

from __future__ import annotations

import os
import sys
from typing import Any


def local_session(app_name: str, master: str = "local[2]", **conf: str) -> Any:
    """A local SparkSession on 127.0.0.1 whose Python workers run this interpreter.

    UI and console progress off, 2 shuffle partitions, UTC session time zone, the source
    registered; ``conf`` adds or overrides Spark settings (dots as in Spark, e.g.
    ``**{"spark.sql.streaming.stopTimeout": "60s"}``). Credentials are left to the caller.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable  # pyarrow and this package live here
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from spark_integration.source import register

    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.sql.session.timeZone": "UTC",
        **conf,
    }
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
