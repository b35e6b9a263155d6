"""Credentials of the IAM role named by ``roleArn``: STS AssumeRole, refreshed before expiry.

The base credentials (the normal boto3 chain of the process: environment, profile, instance
or pod role) call ``sts:AssumeRole`` once per process, lazily, on the first AWS call; botocore's
:class:`~botocore.credentials.DeferredRefreshableCredentials` calls it again when the role's
credentials are within 15 minutes of expiry (advisory: a failure keeps the old ones) or 10
minutes (mandatory). One such object per process and role serves every client built by
:func:`spark_integration.clients.client` (Kinesis, DynamoDB; driver and executors alike).
Neither the external ID nor any key is logged; AWS error messages have the external ID masked.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

import boto3
from botocore.credentials import (
    CredentialProvider,
    CredentialResolver,
    DeferredRefreshableCredentials,
)
from botocore.exceptions import ClientError

from kinesis.errors import KinesisAccessDeniedError, access_denied_message, is_access_denied
from spark_integration.errors import InvalidOptionError
from spark_integration.options import AssumeRoleOptions

log = logging.getLogger(__name__)

#: DurationSeconds of each AssumeRole (one hour: the default maximum of an IAM role).
ROLE_DURATION_S = 3600
METHOD = "kinesis-source-assume-role"

_CACHE: dict[tuple[AssumeRoleOptions, str | None], DeferredRefreshableCredentials] = {}
_LOCK = threading.Lock()


def role_credentials(role: AssumeRoleOptions, region: str | None) -> DeferredRefreshableCredentials:
    """This process's refreshable credentials for ``role`` (made once, fetched on first use)."""
    key = (role, region)
    with _LOCK:
        found = _CACHE.get(key)
        if found is None:
            found = refreshable(role, region)
            _CACHE[key] = found
        return found


def refreshable(role: AssumeRoleOptions, region: str | None, *,
                time_fetcher: Callable[[], datetime] | None = None
                ) -> DeferredRefreshableCredentials:
    """New credentials for ``role`` that assume it on first use and again before expiry."""
    fetch = _fetcher(role, region)
    if time_fetcher is None:
        return DeferredRefreshableCredentials(refresh_using=fetch, method=METHOD)
    return DeferredRefreshableCredentials(refresh_using=fetch, method=METHOD,
                                          time_fetcher=time_fetcher)


def use_role(core: Any, role: AssumeRoleOptions, region: str | None) -> None:
    """Make the botocore session ``core`` sign every request with ``role``'s credentials."""
    credentials = role_credentials(role, region)
    core.register_component("credential_provider", CredentialResolver([_Fixed(credentials)]))


class _Fixed(CredentialProvider):
    """A credential provider that always answers the given (refreshable) credentials."""

    METHOD = METHOD

    def __init__(self, credentials: DeferredRefreshableCredentials):
        super().__init__()
        self._credentials = credentials

    def load(self) -> DeferredRefreshableCredentials:
        return self._credentials


def _fetcher(role: AssumeRoleOptions, region: str | None) -> Callable[[], dict[str, str]]:
    sts: Any = None

    def fetch() -> dict[str, str]:
        nonlocal sts
        if sts is None:  # the process's default credential chain: never the role's own
            sts = boto3.session.Session(region_name=region).client(
                "sts", endpoint_url=role.sts_endpoint_url)
        kwargs: dict[str, Any] = {"RoleArn": role.role_arn, "RoleSessionName": role.session_name,
                                  "DurationSeconds": ROLE_DURATION_S}
        if role.external_id is not None:
            kwargs["ExternalId"] = role.external_id
        try:
            answer = sts.assume_role(**kwargs)
        except ClientError as exc:
            raise _named(exc, role) from None
        credentials = answer["Credentials"]
        expiry = credentials["Expiration"]
        log.info("assumed role %s (session %s); its credentials expire at %s",
                 role.role_arn, role.session_name, expiry)
        return {
            "access_key": credentials["AccessKeyId"],
            "secret_key": credentials["SecretAccessKey"],
            "token": credentials["SessionToken"],
            "expiry_time": expiry.isoformat() if isinstance(expiry, datetime) else str(expiry),
        }

    return fetch


def _named(exc: ClientError, role: AssumeRoleOptions) -> Exception:
    """The error to raise for a failed AssumeRole, with the external ID masked."""
    text = str(exc)
    if role.external_id:
        text = text.replace(role.external_id, "***")
    if is_access_denied(exc):
        message = access_denied_message(
            "AssumeRole", f"IAM role {role.role_arn}", "sts:AssumeRole", Exception(text))
        return KinesisAccessDeniedError(
            f"{message}; the role's trust policy must also allow these base credentials "
            "(and require the external ID given as roleExternalId, if any)", "sts:AssumeRole")
    return InvalidOptionError(
        f"option 'roleArn': STS AssumeRole of {role.role_arn} as session "
        f"{role.session_name!r} failed: {text}", option="roleArn")
