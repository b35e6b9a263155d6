"""boto3 clients built from the source options.

Credentials come from the normal boto3 chain or, with ``roleArn``, from the role it assumes
(:mod:`spark_integration.assume_role`).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import boto3
import botocore.session
from botocore.config import Config
from botocore.utils import parse_timestamp

from spark_integration.assume_role import use_role
from spark_integration.errors import InvalidOptionError
from spark_integration.options import AssumeRoleOptions, KinesisOptions

_CLIENTS: dict[tuple[str, str | None, str | None, str, AssumeRoleOptions | None], Any] = {}
_LOCK = threading.Lock()

# Retries of throttling and 5xx are done by kinesis.consumer.retrieval.failures (jittered, interruptible); the
# botocore layer only does a couple of quick ones for connection-level hiccups.
_CONFIG = Config(retries={"max_attempts": 2, "mode": "standard"}, max_pool_connections=32,
                 connect_timeout=5, read_timeout=30)


def utc_timestamp(value: Any) -> datetime:
    """botocore timestamp parser: epoch numbers straight to UTC datetimes.

    Kinesis sends ``ApproximateArrivalTimestamp`` as epoch seconds; botocore's default parser
    goes through dateutil's local time zone for each record, a large share of the client-side
    cost of GetRecords. Anything that is not a number falls back to botocore's parser.
    """
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, tz=UTC)
    try:
        return datetime.fromtimestamp(float(value), tz=UTC)
    except (TypeError, ValueError):
        parsed: datetime = parse_timestamp(value)
        return parsed.astimezone(UTC)


#: ``role`` values: who makes the calls, appended to the User-Agent (AWS-side attribution).
ROLES = ("driver", "executor")


def user_agent_tag(role: str) -> str:
    """The User-Agent suffix of this source's clients: ``kinesis-hashring-spark/<role>``."""
    return f"kinesis-hashring-spark/{role}"


def client(service: str, options: KinesisOptions, *, role: str = "driver") -> Any:
    """A cached boto3 client for ``service`` in this process (one per region, endpoint, role,
    assumed IAM role).

    boto3 clients are thread-safe; Spark reuses Python workers, so the cache saves the client
    construction (tens of milliseconds) on every task. ``role`` ("driver" or "executor") is
    appended to the User-Agent, so the requests of each side can be told apart.
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    key = (service, options.region, options.endpoint_url, role, options.assume_role)
    with _LOCK:
        found = _CLIENTS.get(key)
        if found is None:
            core = botocore.session.get_session()
            core.get_component("response_parser_factory").set_parser_defaults(
                timestamp_parser=utc_timestamp)
            session = boto3.session.Session(botocore_session=core, region_name=options.region)
            if session.region_name is None:
                raise InvalidOptionError(
                    "option 'region': not set, and the boto3 chain has no default region "
                    "(AWS_REGION / AWS_DEFAULT_REGION / profile): set .option('region', ...)",
                    option="region",
                )
            if options.assume_role is not None:
                use_role(core, options.assume_role, session.region_name)
            config = _CONFIG.merge(Config(user_agent_extra=user_agent_tag(role)))
            found = session.client(service, endpoint_url=options.endpoint_url, config=config)
            _CLIENTS[key] = found
        return found
