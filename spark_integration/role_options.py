"""``roleArn`` and its companions: the IAM role the driver and the executors assume.

The role's credentials come from STS (:mod:`spark_integration.assume_role`); these options only
name the role. ``roleExternalId`` is handed out like a shared secret: it is never echoed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from spark_integration.option_values import fail, url_option

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
