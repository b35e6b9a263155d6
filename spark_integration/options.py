"""Options of the ``kinesis`` data source: parsed and validated once, on the driver.

Every problem raises :class:`~kinesis.errors.InvalidOptionError` naming the option and saying how
to fix it. Values are never echoed for options whose name looks secret: credentials come from the
normal boto3 chain (environment, profile, instance/pod role), never from options; ``roleArn``
exchanges them for an assumed role's (:mod:`spark_integration.assume_role`), and
``roleExternalId`` is never echoed either.
"""

from __future__ import annotations

import difflib
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal
from urllib.parse import urlparse

from kinesis.consumer.positions import TRIM_HORIZON, Checkpoint
from kinesis.errors import InvalidOptionError
from spark_integration.offsets import at_timestamp_ms

InitialPosition = Literal["LATEST", "TRIM_HORIZON", "AT_TIMESTAMP"]
ConsumerType = Literal["GetRecords", "SubscribeToShard"]
CONSUMER_TYPES: tuple[ConsumerType, ...] = ("GetRecords", "SubscribeToShard")
MembershipKind = Literal["static", "kubernetes", "dynamodb"]

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
_KUBERNETES_ONLY = ("kubernetesNamespace", "kubeconfig", "kubernetesMode",
                    "kubernetesLabelSelector", "kubernetesRefreshInterval",
                    "kubernetesMaxStaleness")
_GROUP_ONLY = ("applicationName", "memberId", "membership", "members", "replicas",
               "leaseDuration", *_KUBERNETES_ONLY)
#: KubernetesMembership modes (hashring.membership.k8s_api.MODES), spelled as options.
KUBERNETES_MODES = ("deployment", "replicaset", "statefulset", "label_selector")
_SECRET_HINTS = ("secret", "password", "token", "accesskey", "credential", "sessionkey")
_ROLE_ONLY = ("roleSessionName", "roleExternalId", "stsEndpointUrl")
#: Accepted, but never kept in ``raw`` nor echoed in messages.
_NEVER_ECHOED = ("roleexternalid",)
DEFAULT_ROLE_SESSION_NAME = "kinesis-hashring-spark"

_STREAM_NAME = re.compile(r"^[a-zA-Z0-9_.-]{1,128}$")
_CONSUMER_NAME = _STREAM_NAME  # the same rule (RegisterStreamConsumer's ConsumerName)
_TABLE_NAME = re.compile(r"^[a-zA-Z0-9_.-]{3,255}$")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
_ROLE_ARN = re.compile(r"^arn:aws(-[a-z]+)*:iam::\d{12}:role/([\w+=,.@-]+/)*[\w+=,.@-]{1,64}$")
_SESSION_NAME = re.compile(r"^[\w+=,.@-]{2,64}$")
_EXTERNAL_ID = re.compile(r"^[\w+=,.@:/-]{2,1224}$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_BYTES = re.compile(r"^\s*(\d+)\s*([kmg]i?b?|b)?\s*$", re.IGNORECASE)
_BYTE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}

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
class KubernetesOptions:
    """``membership=kubernetes``: how to build ``hashring.KubernetesMembership``.

    ``None`` fields use its defaults (namespace: ``POD_NAMESPACE``, then the service
    account's namespace file; API client: in-cluster config, then ``~/.kube/config``).
    """

    namespace: str | None = None
    kubeconfig: str | None = None
    mode: str = "deployment"
    label_selector: str | None = None
    refresh_interval_s: float = 5.0
    max_staleness_s: float = 60.0


@dataclass(frozen=True)
class GroupOptions:
    """Group mode: several Spark applications share the shards through a DynamoDB lease table."""

    lease_table: str
    application_name: str
    member_id: str
    membership: MembershipKind
    members: tuple[str, ...] = ()
    replicas: int = 0
    lease_duration_s: float = 10.0
    kubernetes: KubernetesOptions | None = None


@dataclass(frozen=True)
class AssumeRoleOptions:
    """``roleArn``: the driver and the executors call AWS as this IAM role (STS AssumeRole)."""

    role_arn: str
    session_name: str = DEFAULT_ROLE_SESSION_NAME
    external_id: str | None = field(default=None, repr=False)
    sts_endpoint_url: str | None = None
    """None: the region's STS endpoint (boto3's default)."""


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
    endpoint = _endpoint(opts.get("endpointurl"))
    default_position = "LATEST" if streaming else "TRIM_HORIZON"
    position = _position(opts.get("initialposition", default_position), streaming=streaming)
    timestamp = _timestamp(opts.get("initialtimestamp"), position)
    per_shard = _int(opts, "maxRecordsPerShard", DEFAULT_MAX_RECORDS_PER_SHARD,
                     low=1, high=MAX_RECORDS_PER_SHARD_LIMIT)
    bytes_per_shard = _size(opts, "maxBytesPerShard", high=MAX_BYTES_PER_SHARD_LIMIT)
    per_trigger = _int(opts, "maxRecordsPerTrigger", None, low=1, high=2**62)
    per_partition = _int(opts, "shardsPerPartition", 1, low=1, high=10_000)
    shipped = _bytes(opts, "maxShippedBytesPerPartition", DEFAULT_MAX_SHIPPED_BYTES,
                     high=MAX_SHIPPED_BYTES_LIMIT)
    interval = _duration(opts, "describeShardInterval", 10.0, low=0.0)
    consumer_type, consumer_name = _consumer(opts)
    fail_on_loss = _bool(opts, "failOnDataLoss", True)
    role = _assume_role(opts)
    group = _group(opts, streaming=streaming)
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


def _fail(option: str, message: str) -> InvalidOptionError:
    return InvalidOptionError(f"option '{option}': {message}", option=option)


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
        raise _fail("streamName", "is required: .option('streamName', 'orders') "
                    "(several streams: a comma-separated list)")
    names = [n.strip() for n in value.split(",")]
    for name in names:
        if not _STREAM_NAME.match(name):
            raise _fail("streamName", f"{name!r} is not a valid Kinesis stream name "
                        "(1-128 characters from a-z, A-Z, 0-9, '_', '.', '-'; "
                        "separate several streams with commas)")
    if len(set(names)) != len(names):
        raise _fail("streamName", f"lists a stream twice: {value!r}")
    return tuple(sorted(names))


def _region(value: str | None) -> str | None:
    if value is None or value == "":
        return None
    if not _REGION.match(value):
        raise _fail("region", f"{value!r} is not an AWS region name such as 'us-east-1'")
    return value


def _endpoint(value: str | None, name: str = "endpointUrl") -> str | None:
    if value is None or value == "":
        return None
    url = urlparse(value)
    if url.scheme not in ("http", "https") or not url.netloc:
        raise _fail(name, f"{value!r} is not an http(s) URL such as "
                    "'http://127.0.0.1:5000' (leave it unset for AWS)")
    return value.rstrip("/")


def _assume_role(opts: Mapping[str, str]) -> AssumeRoleOptions | None:
    arn = (opts.get("rolearn") or "").strip()
    if not arn:
        present = [n for n in _ROLE_ONLY if opts.get(n.lower())]
        if present:
            raise _fail(present[0], "is only used with 'roleArn' (the IAM role to assume)")
        return None
    if not _ROLE_ARN.match(arn):
        raise _fail("roleArn", f"{arn!r} is not an IAM role ARN such as "
                    "'arn:aws:iam::123456789012:role/kinesis-reader'")
    session = (opts.get("rolesessionname") or "").strip() or DEFAULT_ROLE_SESSION_NAME
    if not _SESSION_NAME.match(session):
        raise _fail("roleSessionName", f"{session!r} is not a role session name (2-64 "
                    "characters from a-z, A-Z, 0-9 and '_+=,.@-')")
    external = (opts.get("roleexternalid") or "").strip() or None
    if external is not None and not _EXTERNAL_ID.match(external):
        # never echo it: an external ID is handed out like a shared secret
        raise _fail("roleExternalId", "is not a valid external ID (2-1224 characters from "
                    "a-z, A-Z, 0-9 and '_+=,.@:/-'); the value is not shown")
    sts = _endpoint(opts.get("stsendpointurl"), "stsEndpointUrl")
    return AssumeRoleOptions(role_arn=arn, session_name=session, external_id=external,
                             sts_endpoint_url=sts)


def _position(value: str, *, streaming: bool) -> InitialPosition:
    upper = value.strip().upper()
    if upper not in ("LATEST", "TRIM_HORIZON", "AT_TIMESTAMP"):
        raise _fail("initialPosition", f"{value!r} is not one of LATEST, TRIM_HORIZON, "
                    "AT_TIMESTAMP")
    if upper == "LATEST" and not streaming:
        raise _fail("initialPosition", "LATEST makes an empty batch read; a batch read "
                    "(spark.read) backfills from TRIM_HORIZON or AT_TIMESTAMP up to now")
    return upper  # type: ignore[return-value]


def parse_timestamp_ms(value: str) -> int:
    """Epoch milliseconds from ISO-8601 (naive means UTC) or epoch seconds / milliseconds."""
    text = value.strip()
    try:
        number = float(text)
    except ValueError:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return int(parsed.timestamp() * 1000)
    # 1e11 seconds is the year 5138: anything larger is milliseconds.
    return int(number) if number > 1e11 else int(number * 1000)


def _timestamp(value: str | None, position: InitialPosition) -> int | None:
    if position != "AT_TIMESTAMP":
        if value:
            raise _fail("initialTimestamp", "is only used with initialPosition=AT_TIMESTAMP")
        return None
    if not value:
        raise _fail("initialTimestamp", "is required with initialPosition=AT_TIMESTAMP: an "
                    "ISO-8601 time such as '2024-05-01T12:00:00Z' or epoch seconds")
    try:
        ms = parse_timestamp_ms(value)
    except ValueError:
        raise _fail("initialTimestamp", f"{value!r} is neither ISO-8601 "
                    "('2024-05-01T12:00:00Z') nor epoch seconds/milliseconds") from None
    if ms < 0:
        raise _fail("initialTimestamp", f"{value!r} is before 1970")
    return ms


def _int(opts: Mapping[str, str], name: str, default: int | None, *, low: int,
         high: int) -> int | None:
    value = opts.get(name.lower())
    if value is None or value == "":
        return default
    try:
        number = int(value.strip())
    except ValueError:
        raise _fail(name, f"{value!r} is not an integer") from None
    if not low <= number <= high:
        raise _fail(name, f"{number} is out of range: use {low}..{high}")
    return number


def _consumer(opts: Mapping[str, str]) -> tuple[ConsumerType, str | None]:
    text = (opts.get("consumertype") or "").strip()
    by_lower = {t.lower(): t for t in CONSUMER_TYPES}
    kind = by_lower.get(text.lower()) if text else "GetRecords"
    if kind is None:
        close = difflib.get_close_matches(text.lower(), list(by_lower), n=1, cutoff=0.6)
        hint = f" Did you mean '{by_lower[close[0]]}'?" if close else ""
        raise _fail("consumerType", f"{text!r} is not one of {', '.join(CONSUMER_TYPES)}.{hint} "
                    "(Enhanced Fan-Out is SubscribeToShard)")
    name = (opts.get("consumername") or "").strip() or None
    if kind == "GetRecords":
        if name is not None:
            raise _fail("consumerName", "is only used with consumerType=SubscribeToShard "
                        "(GetRecords needs no registered consumer)")
        return kind, None
    if name is None:
        raise _fail("consumerName", "is required with consumerType=SubscribeToShard: the "
                    "stream consumer to register, or reuse if it exists, e.g. 'orders-spark'. "
                    "Give each application its own: Kinesis keeps one subscription per "
                    "consumer and shard")
    if not _CONSUMER_NAME.match(name):
        raise _fail("consumerName", f"{name!r} is not a valid stream consumer name "
                    "(1-128 characters from a-z, A-Z, 0-9, '_', '.', '-')")
    return kind, name


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    value = (opts.get(name.lower()) or "").strip().lower()
    if not value:
        return default
    if value not in ("true", "false"):
        raise _fail(name, f"{value!r} is neither 'true' nor 'false'")
    return value == "true"


def parse_bytes(value: str) -> int:
    """Bytes from '4m', '512k', '4MiB', '1g' (binary units, as Spark's) or a bare number."""
    match = _BYTES.match(value)
    if not match:
        raise ValueError(value)
    unit = (match.group(2) or "").lower()[:1]
    return int(match.group(1)) * _BYTE_UNITS[unit]


def _bytes(opts: Mapping[str, str], name: str, default: int, *, high: int) -> int:
    value = opts.get(name.lower())
    if value is None or value == "":
        return default
    try:
        number = parse_bytes(value)
    except ValueError:
        raise _fail(name, f"{value!r} is not a size such as '4m', '512k' or '1048576' "
                    "(bytes; 0 turns shipping off)") from None
    if number > high:
        raise _fail(name, f"{value!r} is too large: use at most {high >> 20}m (Spark sends "
                    "every task through its RPC layer; larger ranges are better re-read "
                    "by the executors)")
    return number


def _size(opts: Mapping[str, str], name: str, *, high: int) -> int | None:
    """A positive size in bytes ('1m', '512k', a number), or None when unset."""
    value = opts.get(name.lower())
    if value is None or value == "":
        return None
    try:
        number = parse_bytes(value)
    except ValueError:
        raise _fail(name, f"{value!r} is not a size such as '1m', '512k' or '1048576' "
                    "(bytes)") from None
    if not 1 <= number <= high:
        raise _fail(name, f"{value!r} is out of range: use a positive size of at most "
                    f"{high >> 30}g (unset: no byte limit)")
    return number


def parse_duration_s(value: str) -> float:
    """Seconds from '250ms', '10s', '5m', '1h' or a bare number of seconds."""
    match = _DURATION.match(value)
    if not match:
        raise ValueError(value)
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


def _duration(opts: Mapping[str, str], name: str, default: float, *, low: float) -> float:
    value = opts.get(name.lower())
    if value is None or value == "":
        return default
    try:
        seconds = parse_duration_s(value)
    except ValueError:
        raise _fail(name, f"{value!r} is not a duration such as '500ms', '10s', '5m'") from None
    if seconds < low:
        raise _fail(name, f"{value!r} must be at least {low} s")
    return seconds


def _group(opts: Mapping[str, str], *, streaming: bool) -> GroupOptions | None:
    table = opts.get("leasetable")
    if not table:
        present = [n for n in _GROUP_ONLY if opts.get(n.lower())]
        if present:
            raise _fail(present[0], "is a group-mode option: set 'leaseTable' too "
                        "(the DynamoDB table the applications share)")
        return None
    if not streaming:
        raise _fail("leaseTable", "group mode is for streaming queries "
                    "(spark.readStream); a batch read takes every shard")
    if not _TABLE_NAME.match(table):
        raise _fail("leaseTable", f"{table!r} is not a valid DynamoDB table name "
                    "(3-255 characters from a-z, A-Z, 0-9, '_', '.', '-')")
    app = opts.get("applicationname", "")
    if not app.strip():
        raise _fail("applicationName", "is required in group mode: the consumer name every "
                    "application of the group shares (it is part of every lease key)")
    app = app.strip()
    if "/" in app or app.startswith("__") or any(c.isspace() for c in app):
        raise _fail("applicationName", f"{app!r} may not contain '/' or whitespace nor start "
                    "with '__': it is the first part of every lease key "
                    "'<application>/<stream>/<shardId>'; pick a name like 'orders-app'")
    kind = (opts.get("membership") or "dynamodb").strip().lower()
    if kind not in ("static", "kubernetes", "dynamodb"):
        raise _fail("membership", f"{kind!r} is not one of static, kubernetes, dynamodb")
    member = (opts.get("memberid") or "").strip() or _default_member_id(kind)
    if any(c.isspace() for c in member):
        raise _fail("memberId", f"{member!r} may not contain whitespace: it names this application "
                    "in the lease table and in 'members'; use e.g. 'orders-driver-1'")
    members: tuple[str, ...] = ()
    if kind == "static":
        raw = opts.get("members") or ""
        members = tuple(sorted({m.strip() for m in raw.split(",") if m.strip()}))
        if not members:
            raise _fail("members", "is required with membership=static: a comma-separated "
                        "list of every application's memberId")
        if member not in members:
            raise _fail("memberId", f"{member!r} is not in 'members' ({', '.join(members)})")
    elif opts.get("members"):
        raise _fail("members", "is only used with membership=static")
    kubernetes = None
    if kind == "kubernetes":
        kubernetes = _kubernetes(opts)
    else:
        present = [n for n in _KUBERNETES_ONLY if opts.get(n.lower())]
        if present:
            raise _fail(present[0], f"is only used with membership=kubernetes (membership is "
                        f"{kind!r})")
    replicas = _int(opts, "replicas", 0, low=0, high=10)
    lease = _duration(opts, "leaseDuration", 10.0, low=0.3)
    return GroupOptions(
        lease_table=table,
        application_name=app.strip(),
        member_id=member,
        membership=kind,  # type: ignore[arg-type]
        members=members,
        replicas=replicas or 0,
        lease_duration_s=lease,
        kubernetes=kubernetes,
    )


def _default_member_id(kind: str) -> str:
    """``memberId`` when unset: the host name; with Kubernetes, the pod name as
    ``KubernetesMembership`` finds it (``POD_NAME``, then ``HOSTNAME``)."""
    if kind == "kubernetes":
        for var in ("POD_NAME", "HOSTNAME"):
            value = os.environ.get(var, "").strip()
            if value:
                return value
    return socket.gethostname()


def _kubernetes(opts: Mapping[str, str]) -> KubernetesOptions:
    namespace = (opts.get("kubernetesnamespace") or "").strip() or None
    if namespace is not None and not _NAMESPACE.match(namespace):
        raise _fail("kubernetesNamespace", f"{namespace!r} is not a Kubernetes namespace name "
                    "(lower-case letters, digits and '-', at most 63 characters)")
    kubeconfig = (opts.get("kubeconfig") or "").strip() or None
    if kubeconfig is not None:
        kubeconfig = os.path.expanduser(kubeconfig)
        if not os.path.isfile(kubeconfig):
            raise _fail("kubeconfig", f"{kubeconfig!r} is not a file on the driver: give the "
                        "path of a kubeconfig file, or leave it unset inside a pod (the "
                        "in-cluster service account is used)")
    selector = (opts.get("kuberneteslabelselector") or "").strip() or None
    mode_text = (opts.get("kubernetesmode") or "").strip().lower()
    mode = mode_text or ("label_selector" if selector else "deployment")
    if mode not in KUBERNETES_MODES:
        raise _fail("kubernetesMode", f"{mode_text!r} is not one of "
                    f"{', '.join(KUBERNETES_MODES)}")
    if mode == "label_selector" and selector is None:
        raise _fail("kubernetesLabelSelector", "is required with kubernetesMode=label_selector: "
                    "a selector matching every driver pod of the group, e.g. 'app=orders-spark'")
    if mode != "label_selector" and selector is not None:
        raise _fail("kubernetesLabelSelector", f"is only used with kubernetesMode=label_selector "
                    f"(kubernetesMode is {mode!r}): drop one of them")
    refresh = _duration(opts, "kubernetesRefreshInterval", 5.0, low=0.001)
    stale = _duration(opts, "kubernetesMaxStaleness", max(60.0, refresh), low=0.001)
    if stale < refresh:
        raise _fail("kubernetesMaxStaleness", f"{stale:g} s is less than "
                    f"kubernetesRefreshInterval ({refresh:g} s): the member list is refreshed "
                    "once per interval, so it must be allowed to be at least that old")
    return KubernetesOptions(namespace=namespace, kubeconfig=kubeconfig, mode=mode,
                             label_selector=selector, refresh_interval_s=refresh,
                             max_staleness_s=stale)
