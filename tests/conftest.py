"""Shared fixtures: one embedded moto server per test session, reset per test."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

from kinesis.testing import LocalAWS  # noqa: E402


@pytest.fixture(scope="session")
def _moto_server() -> Iterator[LocalAWS]:
    with LocalAWS() as aws:
        yield aws


@pytest.fixture
def aws(_moto_server: LocalAWS) -> LocalAWS:
    """A clean moto server (HTTP on 127.0.0.1): ``aws.endpoint_url``, ``aws.client(name)``."""
    _moto_server.reset()
    return _moto_server


# --- Kinesis resharding (helper D): moto patched to reshard like AWS ----------------------


@pytest.fixture
def kinesis_resharding(aws: LocalAWS) -> Iterator[LocalAWS]:
    """The ``aws`` server with moto's Kinesis resharding fixed (tests/support/moto_kinesis.py)."""
    from tests.support.moto_kinesis import kinesis_resharding as patched

    with patched():
        yield aws


# --- Kubernetes (helper B): a fake API server per test, enforcing the example Role -----------


@pytest.fixture
def fake_k8s() -> Iterator[object]:
    """A started ``tests.support.fake_k8s.FakeKubernetes`` in namespace "streaming".

    It answers 403 to anything ``examples/k8s/rbac.yaml``'s Role does not grant, so
    every Kubernetes test also proves that Role is enough.
    """
    from tests.support.fake_k8s import FakeKubernetes, load_role_rules

    rules = load_role_rules(str(ROOT / "examples" / "k8s" / "rbac.yaml"))
    with FakeKubernetes(namespace="streaming", rbac_rules=rules) as fake:
        yield fake


# --- Spark (spark_integration tests) ----------------------------------------------------
# One local[2] session for the whole test session, created only when a Spark test asks.


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A local[2] SparkSession with the ``kinesis`` source registered (UI off, UTC)."""
    from tests.spark_support import make_session

    session = make_session("local[2]")
    yield session
    session.stop()


# --- the chaos suite (tests/chaos): profile and seed ------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaos", "the chaos suite (tests/chaos)")
    group.addoption("--chaos-profile", default=None, choices=("fast", "long"),
                    help="fast (default, part of the normal run) or long (make chaos); env CHAOS_PROFILE")
    group.addoption("--chaos-seed", default=None, type=int,
                    help="replay the faults of a run (its seed is printed first); env CHAOS_SEED")


@pytest.fixture
def chaos_profile(request: pytest.FixtureRequest) -> str:
    return str(request.config.getoption("--chaos-profile") or os.environ.get("CHAOS_PROFILE") or "fast")


@pytest.fixture
def chaos_seed(request: pytest.FixtureRequest) -> int:
    import random

    value = request.config.getoption("--chaos-seed") or os.environ.get("CHAOS_SEED")
    return int(value) if value is not None else random.SystemRandom().randrange(1, 10**6)
