"""What the retention period does to a moto shard, on the in-process moto server's storage
(moto keeps records for ever): :func:`trim_oldest` deletes a shard's oldest records."""

from __future__ import annotations

from typing import Any

MOTO_ACCOUNT = "123456789012"
"""moto's default account: the one the "testing" keys map to."""


def moto_stream(name: str, region: str = "us-east-1") -> Any:
    """The in-process moto server's model of stream ``name`` (for simulating what AWS does)."""
    from moto.kinesis.models import kinesis_backends

    return kinesis_backends[MOTO_ACCOUNT][region].streams[name]


def trim_oldest(stream: str, shard_id: str, count: int) -> None:
    """Delete the ``count`` oldest records of a moto shard, as the retention period does."""
    records = moto_stream(stream).shards[shard_id].records
    for sequence_number in list(records)[:count]:
        del records[sequence_number]
