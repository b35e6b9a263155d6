"""Options of the ``kinesis`` data source: parsed and validated once, on the driver.

Every problem raises :class:`~spark_integration.errors.InvalidOptionError` naming the option and saying how
to fix it. Values are never echoed for options whose name looks secret: credentials come from the
normal boto3 chain (environment, profile, instance/pod role), never from options; ``roleArn``
exchanges them for an assumed role's (:mod:`spark_integration.assume_role`), and
``roleExternalId`` is never echoed either.

``roleArn`` and its companions: the IAM role the driver and the executors assume.

The role's credentials come from STS (:mod:`spark_integration.assume_role`); these options only
name the role. ``roleExternalId`` is handed out like a shared secret: it is never echoed.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from kinesis.consumer.retrieval import TRIM_HORIZON, Checkpoint
from spark_integration.errors import InvalidOptionError
from spark_integration.group_options import (
    KUBERNETES_MODES,
    GroupOptions,
    KubernetesOptions,
    MembershipKind,
    group_options,
)
from spark_integration.offsets import at_timestamp_ms
from spark_integration.option_values import (
    bool_option,
    bytes_option,
    duration_option,
    fail,
    int_option,
    parse_bytes,
    parse_duration_s,
    parse_timestamp_ms,
    size_option,
    url_option,
)

__all__ = ["CONSUMER_TYPES", "DEFAULT_MAX_RECORDS_PER_SHARD", "DEFAULT_MAX_SHIPPED_BYTES", "DEFAULT_ROLE_SESSION_NAME", "KUBERNETES_MODES", "MAX_BYTES_PER_SHARD_LIMIT", "MAX_RECORDS_PER_SHARD_LIMIT", "MAX_SHIPPED_BYTES_LIMIT", "STREAM_OPTIONS", "AssumeRoleOptions", "ConsumerType", "GroupOptions", "InitialPosition", "KinesisOptions", "KubernetesOptions", "MembershipKind", "parse_bytes", "parse_duration_s", "parse_options", "parse_timestamp_ms"]


DEFAULT_ROLE_SESSION_NAME = "kinesis-hashring-spark"
ROLE_ONLY = ("roleSessionName", "roleExternalId", "stsEndpointUrl")
"""Options that only mean something with ``roleArn``."""

_ROLE_ARN = re.compile(r"^arn:aws(-[a-z]+)*:iam::\d{12}:role/([\w+=,.@-]+/)*[\w+=,.@-]{1,64}$")
_SESSION_NAME = re.compile(r"^[\w+=,.@-]{2,64}$")
_EXTERNAL_ID = re.compile(r"^[\w+=,.@:/-]{2,1224}$")


@dataclass(frozen=True)
class AssumeRoleOptions:
    """``roleArn``: the driver and the executors call AWS as this IAM role (STS AssumeRole)."""

    role_arn: str
    session_name: str = DEFAULT_ROLE_SESSION_NAME
    external_id: str | None = field(default=None, repr=False)
    sts_endpoint_url: str | None = None
    """None: the region's STS endpoint (boto3's default)."""


def assume_role_options(opts: Mapping[str, str]) -> AssumeRoleOptions | None:
    arn = (opts.get("rolearn") or "").strip()
    if not arn:
        present = [n for n in ROLE_ONLY if opts.get(n.lower())]
        if present:
            raise fail(present[0], "is only used with 'roleArn' (the IAM role to assume)")
        return None
    if not _ROLE_ARN.match(arn):
        raise fail("roleArn", f"{arn!r} is not an IAM role ARN such as "
                   "'arn:aws:iam::123456789012:role/kinesis-reader'")
    session = (opts.get("rolesessionname") or "").strip() or DEFAULT_ROLE_SESSION_NAME
    if not _SESSION_NAME.match(session):
        raise fail("roleSessionName", f"{session!r} is not a role session name (2-64 "
                   "characters from a-z, A-Z, 0-9 and '_+=,.@-')")
    external = (opts.get("roleexternalid") or "").strip() or None
    if external is not None and not _EXTERNAL_ID.match(external):
        # never echo it: an external ID is handed out like a shared secret
        raise fail("roleExternalId", "is not a valid external ID (2-1224 characters from "
                   "a-z, A-Z, 0-9 and '_+=,.@:/-'); the value is not shown")
    sts = url_option(opts.get("stsendpointurl"), "stsEndpointUrl")
    return AssumeRoleOptions(role_arn=arn, session_name=session, external_id=external,
                             sts_endpoint_url=sts)


InitialPosition = Literal["LATEST", "TRIM_HORIZON", "AT_TIMESTAMP"]
ConsumerType = Literal["GetRecords", "SubscribeToShard"]
CONSUMER_TYPES: tuple[ConsumerType, ...] = ("GetRecords", "SubscribeToShard")

#: Canonical option names (Spark lower-cases option keys; messages use these spellings).
STREAM_OPTIONS = (
    "streamName",
    "region",
    "endpointUrl",
    "initialPosition",
    "initialTimestamp",
    "maxRecordsPerShard",
    "maxBytesPerShard",
    "maxRecordsPerTrigger",
    "shardsPerPartition",
    "maxShippedBytesPerPartition",
    "describeShardInterval",
    "consumerType",
    "consumerName",
    "failOnDataLoss",
    "roleArn",
    "roleSessionName",
    "roleExternalId",
    "stsEndpointUrl",
    "leaseTable",
    "applicationName",
    "memberId",
    "membership",
    "members",
    "replicas",
    "leaseDuration",
    "kubernetesNamespace",
    "kubeconfig",
    "kubernetesMode",
    "kubernetesLabelSelector",
    "kubernetesRefreshInterval",
    "kubernetesMaxStaleness",
)
_CANONICAL = {name.lower(): name for name in STREAM_OPTIONS}
_SECRET_HINTS = ("secret", "password", "token", "accesskey", "credential", "sessionkey")
#: Accepted, but never kept in ``raw`` nor echoed in messages.
_NEVER_ECHOED = ("roleexternalid",)

_STREAM_NAME = re.compile(r"^[a-zA-Z0-9_.-]{1,128}$")
_CONSUMER_NAME = _STREAM_NAME  # the same rule (RegisterStreamConsumer's ConsumerName)
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")

#: Kinesis returns at most 10,000 records per GetRecords call; a micro-batch may take more
#: (several calls) but a cap above this keeps a single shard from starving the others.
DEFAULT_MAX_RECORDS_PER_SHARD = 10_000
MAX_RECORDS_PER_SHARD_LIMIT = 10_000  # GetRecords returns at most 10,000 records a call
#: Records the driver read ahead ride in the input partition up to this many (Arrow) bytes;
#: beyond it the executor reads the range from Kinesis again. Spark logs a warning for tasks
#: over 1000 KiB and refuses serialized tasks over ``spark.rpc.message.maxSize`` (128 MiB).
DEFAULT_MAX_SHIPPED_BYTES = 4 << 20
MAX_SHIPPED_BYTES_LIMIT = 64 << 20
#: ``maxBytesPerShard`` may not exceed this (far beyond what a shard holds in a day).
MAX_BYTES_PER_SHARD_LIMIT = 1 << 40


@dataclass(frozen=True)
class KinesisOptions:
    """The validated options; picklable, so executors get the same view as the driver."""

    streams: tuple[str, ...]
    region: str | None = None
    endpoint_url: str | None = None
    initial_position: InitialPosition = "LATEST"
    initial_timestamp_ms: int | None = None
    max_records_per_shard: int = DEFAULT_MAX_RECORDS_PER_SHARD
    max_bytes_per_shard: int | None = None
    """Payload bytes (data plus partition key) a shard adds to one micro-batch; a range ends
    with the record that reaches the limit, so one larger record still makes progress."""
    max_records_per_trigger: int | None = None
    shards_per_partition: int = 1
    max_shipped_bytes_per_partition: int = DEFAULT_MAX_SHIPPED_BYTES
    """0: never ship records in partitions (executors always read from Kinesis)."""
    describe_shard_interval_s: float = 10.0
    consumer_type: ConsumerType = "GetRecords"
    """How executors read the ranges they read from Kinesis: GetRecords or Enhanced Fan-Out."""
    consumer_name: str | None = None
    """SubscribeToShard: the stream consumer registered (or reused) on every stream."""
    fail_on_data_loss: bool = True
    """False: records trimmed before they were read are skipped (logged and counted)."""
    assume_role: AssumeRoleOptions | None = None
    group: GroupOptions | None = None
    raw: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)

    @property
    def first_start(self) -> Checkpoint:
        """Where a shard the query has not read yet starts: AT_TIMESTAMP, or TRIM_HORIZON (also
        for LATEST, which the caller pins to a timestamp where it applies)."""
        if self.initial_position == "AT_TIMESTAMP":
            assert self.initial_timestamp_ms is not None
            return at_timestamp_ms(self.initial_timestamp_ms)
        return TRIM_HORIZON


def parse_options(options: Mapping[str, str], *, streaming: bool) -> KinesisOptions:
    """Validate the user's options; ``streaming`` is False for ``spark.read`` (bounded)."""
    opts = {str(k).lower(): "" if v is None else str(v) for k, v in options.items()}
    opts.pop("path", None)  # set by .load(path); the stream comes from streamName
    _reject_unknown(opts)

    streams = _streams(opts.get("streamname"))
    region = _region(opts.get("region"))
    endpoint = url_option(opts.get("endpointurl"))
    default_position = "LATEST" if streaming else "TRIM_HORIZON"
    position = _position(opts.get("initialposition", default_position), streaming=streaming)
    timestamp = _timestamp(opts.get("initialtimestamp"), position)
    per_shard = int_option(opts, "maxRecordsPerShard", DEFAULT_MAX_RECORDS_PER_SHARD,
                           low=1, high=MAX_RECORDS_PER_SHARD_LIMIT)
    bytes_per_shard = size_option(opts, "maxBytesPerShard", high=MAX_BYTES_PER_SHARD_LIMIT)
    per_trigger = int_option(opts, "maxRecordsPerTrigger", None, low=1, high=2**62)
    per_partition = int_option(opts, "shardsPerPartition", 1, low=1, high=10_000)
    shipped = bytes_option(opts, "maxShippedBytesPerPartition", DEFAULT_MAX_SHIPPED_BYTES,
                           high=MAX_SHIPPED_BYTES_LIMIT)
    interval = duration_option(opts, "describeShardInterval", 10.0, low=0.0)
    consumer_type, consumer_name = _consumer(opts)
    fail_on_loss = bool_option(opts, "failOnDataLoss", True)
    role = assume_role_options(opts)
    group = group_options(opts, streaming=streaming)
    return KinesisOptions(
        streams=streams,
        region=region,
        endpoint_url=endpoint,
        initial_position=position,
        initial_timestamp_ms=timestamp,
        max_records_per_shard=per_shard if per_shard is not None else DEFAULT_MAX_RECORDS_PER_SHARD,
        max_bytes_per_shard=bytes_per_shard,
        max_records_per_trigger=per_trigger,
        shards_per_partition=per_partition if per_partition is not None else 1,
        max_shipped_bytes_per_partition=shipped,
        describe_shard_interval_s=interval,
        consumer_type=consumer_type,
        consumer_name=consumer_name,
        fail_on_data_loss=fail_on_loss,
        assume_role=role,
        group=group,
        raw=tuple(sorted((k, v) for k, v in opts.items()
                         if not _looks_secret(k) and k not in _NEVER_ECHOED)),
    )


def _looks_secret(name: str) -> bool:
    low = name.lower()
    return any(hint in low for hint in _SECRET_HINTS)


def _reject_unknown(opts: Mapping[str, str]) -> None:
    for key in sorted(opts):
        if key in _CANONICAL:
            continue
        if _looks_secret(key):
            raise InvalidOptionError(
                f"option '{key}' is not accepted: credentials are never passed as options. "
                "Use the boto3 credential chain (AWS_PROFILE, environment variables, or the "
                "instance/pod role) on the driver and the executors.",
                option=key,
            )
        close = difflib.get_close_matches(key, list(_CANONICAL), n=1, cutoff=0.6)
        hint = f" Did you mean '{_CANONICAL[close[0]]}'?" if close else ""
        raise InvalidOptionError(
            f"unknown option '{key}'.{hint} Known options: {', '.join(STREAM_OPTIONS)}.",
            option=key,
        )


def _streams(value: str | None) -> tuple[str, ...]:
    if value is None or not value.strip():
        raise fail("streamName", "is required: .option('streamName', 'orders') "
                   "(several streams: a comma-separated list)")
    names = [n.strip() for n in value.split(",")]
    for name in names:
        if not _STREAM_NAME.match(name):
            raise fail("streamName", f"{name!r} is not a valid Kinesis stream name "
                       "(1-128 characters from a-z, A-Z, 0-9, '_', '.', '-'; "
                       "separate several streams with commas)")
    if len(set(names)) != len(names):
        raise fail("streamName", f"lists a stream twice: {value!r}")
    return tuple(sorted(names))


def _region(value: str | None) -> str | None:
    if value is None or value == "":
        return None
    if not _REGION.match(value):
        raise fail("region", f"{value!r} is not an AWS region name such as 'us-east-1'")
    return value


def _position(value: str, *, streaming: bool) -> InitialPosition:
    upper = value.strip().upper()
    if upper not in ("LATEST", "TRIM_HORIZON", "AT_TIMESTAMP"):
        raise fail("initialPosition", f"{value!r} is not one of LATEST, TRIM_HORIZON, "
                   "AT_TIMESTAMP")
    if upper == "LATEST" and not streaming:
        raise fail("initialPosition", "LATEST makes an empty batch read; a batch read "
                   "(spark.read) backfills from TRIM_HORIZON or AT_TIMESTAMP up to now")
    return upper  # type: ignore[return-value]


def _timestamp(value: str | None, position: InitialPosition) -> int | None:
    if position != "AT_TIMESTAMP":
        if value:
            raise fail("initialTimestamp", "is only used with initialPosition=AT_TIMESTAMP")
        return None
    if not value:
        raise fail("initialTimestamp", "is required with initialPosition=AT_TIMESTAMP: an "
                   "ISO-8601 time such as '2024-05-01T12:00:00Z' or epoch seconds")
    try:
        ms = parse_timestamp_ms(value)
    except ValueError:
        raise fail("initialTimestamp", f"{value!r} is neither ISO-8601 "
                   "('2024-05-01T12:00:00Z') nor epoch seconds/milliseconds") from None
    if ms < 0:
        raise fail("initialTimestamp", f"{value!r} is before 1970")
    return ms


def _consumer(opts: Mapping[str, str]) -> tuple[ConsumerType, str | None]:
    text = (opts.get("consumertype") or "").strip()
    by_lower = {t.lower(): t for t in CONSUMER_TYPES}
    kind = by_lower.get(text.lower()) if text else "GetRecords"
    if kind is None:
        close = difflib.get_close_matches(text.lower(), list(by_lower), n=1, cutoff=0.6)
        hint = f" Did you mean '{by_lower[close[0]]}'?" if close else ""
        raise fail("consumerType", f"{text!r} is not one of {', '.join(CONSUMER_TYPES)}.{hint} "
                   "(Enhanced Fan-Out is SubscribeToShard)")
    name = (opts.get("consumername") or "").strip() or None
    if kind == "GetRecords":
        if name is not None:
            raise fail("consumerName", "is only used with consumerType=SubscribeToShard "
                       "(GetRecords needs no registered consumer)")
        return kind, None
    if name is None:
        raise fail("consumerName", "is required with consumerType=SubscribeToShard: the "
                   "stream consumer to register, or reuse if it exists, e.g. 'orders-spark'. "
                   "Give each application its own: Kinesis keeps one subscription per "
                   "consumer and shard")
    if not _CONSUMER_NAME.match(name):
        raise fail("consumerName", f"{name!r} is not a valid stream consumer name "
                   "(1-128 characters from a-z, A-Z, 0-9, '_', '.', '-')")
    return kind, name
