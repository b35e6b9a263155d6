"""Where ``KubernetesMembership`` gets its pod name, namespace and API client from."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hashring.errors import KubernetesConfigurationError, KubernetesNotInstalledError

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
INSTALL_HINT = "pip install 'kinesis-hashring[k8s]'"


def require_client() -> Any:
    """Import the official ``kubernetes`` client, or say how to install it."""
    try:
        import kubernetes.client
        import kubernetes.config
        import kubernetes.watch
    except ImportError as exc:
        raise KubernetesNotInstalledError(
            "KubernetesMembership needs the official kubernetes client, which is not "
            f"installed ({exc}): run `{INSTALL_HINT}`"
        ) from exc
    return kubernetes


def resolve_pod_name(pod_name: str | None) -> str:
    """The argument, else ``POD_NAME`` (downward API), else ``HOSTNAME``."""
    for source, value in (("pod_name", pod_name), ("POD_NAME", os.environ.get("POD_NAME")),
                          ("HOSTNAME", os.environ.get("HOSTNAME"))):
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise KubernetesConfigurationError(
                f"{source} must be a non-empty pod name, got {value!r}")
        return value.strip()
    raise KubernetesConfigurationError(
        "cannot tell which pod this is: pass pod_name=, or set POD_NAME from the downward API "
        "(env: - name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}})"
    )


def resolve_namespace(namespace: str | None, service_account_file: Path | None = None) -> str:
    """The argument, else ``POD_NAMESPACE``, else the service account's namespace file."""
    if service_account_file is None:
        service_account_file = SERVICE_ACCOUNT_NAMESPACE
    if namespace is not None:
        if not isinstance(namespace, str) or not namespace.strip():
            raise KubernetesConfigurationError(
                f"namespace must be a non-empty string, got {namespace!r}")
        return namespace.strip()
    env = os.environ.get("POD_NAMESPACE", "").strip()
    if env:
        return env
    try:
        text = service_account_file.read_text().strip()
    except OSError:
        text = ""
    if text:
        return text
    raise KubernetesConfigurationError(
        f"cannot tell the namespace: pass namespace=, set POD_NAMESPACE from the downward API "
        f"(fieldPath: metadata.namespace), or run in a pod with {service_account_file} mounted"
    )


def build_api_client(kubeconfig: str | None) -> Any:
    """An ``ApiClient``: in-cluster config by default, else the given or default kubeconfig."""
    kubernetes = require_client()
    client, config = kubernetes.client, kubernetes.config
    cfg = client.Configuration()
    # KubeAPI retries timeouts and 5xx itself (with backoff); urllib3's default 3 retries
    # on top would multiply how long the one refreshing caller can block.
    cfg.retries = False
    if kubeconfig is not None:
        try:
            config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        except (config.ConfigException, OSError, TypeError, ValueError) as exc:
            raise KubernetesConfigurationError(
                f"cannot load kubeconfig {kubeconfig!r}: {exc}") from exc
        return client.ApiClient(cfg)
    try:
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException as in_cluster:
        try:
            config.load_kube_config(client_configuration=cfg)
        except (config.ConfigException, OSError, TypeError, ValueError) as exc:
            raise KubernetesConfigurationError(
                "no Kubernetes API configuration: not running in a cluster "
                f"({in_cluster}) and no usable kubeconfig ({exc}). Run in a pod with a service "
                "account, or pass kubeconfig= or api_client="
            ) from exc
    return client.ApiClient(cfg)
