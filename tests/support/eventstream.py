"""Encode AWS event-stream messages (``application/vnd.amazon.eventstream``) for the test endpoint.

botocore ships only a decoder (``botocore.eventstream``); awscrt's Python API encodes messages
only inside its own RPC connections, and no maintained PyPI package offers a standalone
encoder, so this is the small encoder the test endpoint needs. The wire format::

    prelude:  total length (u32 BE) | headers length (u32 BE) | CRC32 of those 8 bytes (u32 BE)
    headers:  per header: name length (u8) | name | type (u8) | value
    payload
    message CRC32 over everything before it (u32 BE)

Header values here are strings (type 7: u16 BE length + UTF-8), which is all SubscribeToShard
events use (``:message-type``, ``:event-type``, ``:exception-type``, ``:content-type``).
``tests/kinesis/consumer/test_fanout.py`` round-trips every message through botocore's decoder.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping
from typing import Any

_STRING = 7
_PRELUDE = struct.Struct(">II")
_U32 = struct.Struct(">I")


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    if len(raw_name) > 255 or len(raw_value) > 0xFFFF:
        raise ValueError(f"event-stream header {name!r} is too long")
    return bytes([len(raw_name)]) + raw_name + bytes([_STRING]) + struct.pack(">H", len(raw_value)) + raw_value


def encode_message(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One event-stream message with string ``headers`` and ``payload``."""
    raw_headers = b"".join(_header(k, v) for k, v in headers.items())
    total = _PRELUDE.size + 4 + len(raw_headers) + len(payload) + 4
    prelude = _PRELUDE.pack(total, len(raw_headers))
    prelude += _U32.pack(zlib.crc32(prelude))
    body = prelude + raw_headers + payload
    return body + _U32.pack(zlib.crc32(body))


def event(event_type: str, body: Mapping[str, Any]) -> bytes:
    """An ``event`` message whose payload is ``body`` as JSON (e.g. ``SubscribeToShardEvent``)."""
    headers = {":message-type": "event", ":event-type": event_type, ":content-type": "application/json"}
    return encode_message(headers, json.dumps(body).encode())


def initial_response(body: Mapping[str, Any] | None = None) -> bytes:
    """The ``initial-response`` event botocore expects first in a JSON-protocol event stream."""
    return event("initial-response", body or {})


def exception(code: str, message: str) -> bytes:
    """An ``exception`` message: botocore raises it as an ``EventStreamError`` with ``code``."""
    headers = {":message-type": "exception", ":exception-type": code, ":content-type": "application/json"}
    return encode_message(headers, json.dumps({"message": message}).encode())
