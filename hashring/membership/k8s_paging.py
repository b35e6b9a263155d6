"""Paginated, cache-served, compressed list requests (``limit``/``continue``, ``resourceVersion=0``).

What is sent, and why (Kubernetes API concepts, "Resource versions" and
"Retrieving large results sets in chunks"):

* First page: ``resourceVersion=0`` with ``resourceVersionMatch=NotOlderThan``
  and ``limit=<page_size>``. "Any" semantics: the API server answers from its
  watch cache instead of a quorum read from etcd. API servers before the
  snapshottable cache (KEP-4988, beta in 1.34) **ignore ``limit``** for such a
  list and return every item in one response without a ``continue`` token; newer
  ones honour it and hand out ``continue`` tokens over a cache snapshot. Both are
  handled: the loop simply ends when no token comes back.
* Next pages: ``continue=<token>`` and ``limit`` only. A resourceVersion next to
  a continue token is invalid (400) or ignored, depending on the server; the token
  already pins the snapshot, so every page comes from the same resourceVersion.
* ``410 Gone`` on a continue token (it expired, by default after ~5 minutes, or
  the history was compacted) restarts the list from the first page: the 410's own
  "inconsistent continue" token would mix snapshots, which could drop or duplicate
  members. After ``MAX_RESTARTS`` expired tokens in a row the list fails.
* ``Accept-Encoding: gzip``: API servers compress responses over 128 KiB
  (APIResponseCompression, on by default since 1.16); urllib3 sends no such
  header by itself. Pods cannot be listed as metadata only
  (``as=PartialObjectMetadataList``): readiness lives in ``status.conditions``,
  which that form drops, so the modes that need less data read EndpointSlices.

The item dicts are parsed straight from the JSON body (no model classes).
"""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hashring.errors import KubernetesAPIError
from hashring.membership.k8s_errors import ContinueExpiredError, status_of

log = logging.getLogger(__name__)

DEFAULT_PAGE_SIZE = 500  # client-go's pager default
MAX_RESTARTS = 3


@dataclass
class ListStats:
    """What list requests cost this process (cumulative)."""

    lists: int = 0  # complete lists (however many pages)
    pages: int = 0  # list requests sent
    restarts: int = 0  # lists restarted after a 410 on a continue token
    wire_bytes: int = 0  # response bodies as received (compressed when gzip)
    json_bytes: int = 0  # the same, decompressed
    items: int = 0
    last_items: int = 0
    page_sizes: list[int] = field(default_factory=list)  # items per page of the last list


def read_json_body(resp: Any, stats: ListStats) -> Any:
    """Parse an un-preloaded urllib3 response, counting wire and JSON bytes."""
    try:
        raw = resp.read(decode_content=False)
        encoding = (resp.headers.get("Content-Encoding") or "").lower()
    finally:
        resp.release_conn()
    data = zlib.decompress(raw, 16 + zlib.MAX_WBITS) if encoding == "gzip" else raw
    stats.wire_bytes += len(raw)
    stats.json_bytes += len(data)
    return json.loads(data)


def list_all(
    request: Callable[[dict[str, Any]], Any],
    call_page: Callable[[Callable[[], Any]], Any],
    *,
    page_size: int | None,
    compress: bool,
    stats: ListStats,
    what: str,
) -> tuple[list[dict[str, Any]], str]:
    """(every item, the list's resourceVersion), page by page.

    ``request(kwargs)`` sends one list request with the client's keyword arguments
    and returns the raw response; ``call_page(fn)`` runs one page with the caller's
    retries and error translation. ``page_size=None`` sends one unpaginated,
    uncached list (what ``benchmarks/`` compares paging against).
    """
    headers = {"Accept-Encoding": "gzip"} if compress else {}
    for _attempt in range(MAX_RESTARTS + 1):
        items: list[dict[str, Any]] = []
        sizes: list[int] = []
        if page_size is None:
            kwargs: dict[str, Any] = {}
        else:
            kwargs = {"resource_version": "0", "resource_version_match": "NotOlderThan",
                      "limit": page_size}
        rv = ""
        while True:
            page_kwargs = dict(kwargs, _headers=headers) if headers else dict(kwargs)

            def fetch(page_kwargs: dict[str, Any] = page_kwargs) -> dict[str, Any]:
                return _page(request, page_kwargs, stats, what)

            try:
                body = call_page(fetch)
            except ContinueExpiredError:
                stats.restarts += 1
                log.info("%s: continue token expired (410) after %d items; listing again from "
                         "the start", what, len(items))
                break
            meta = body.get("metadata") or {}
            page = body.get("items") or []
            items.extend(page)
            sizes.append(len(page))
            rv = str(meta.get("resourceVersion") or rv)
            token = meta.get("continue")
            if not token or page_size is None:
                stats.lists += 1
                stats.items += len(items)
                stats.last_items = len(items)
                stats.page_sizes = sizes
                return items, rv
            kwargs = {"limit": page_size, "_continue": str(token)}
    raise KubernetesAPIError(
        f"{what}: the continue token expired {MAX_RESTARTS + 1} times in a row (410): pages "
        "come slower than the API server keeps list snapshots. Raise page_size, or check "
        "what slows the requests down", status=410)


def _page(request: Callable[[dict[str, Any]], Any], kwargs: dict[str, Any], stats: ListStats,
          what: str) -> dict[str, Any]:
    try:
        resp = request(kwargs)
    except Exception as exc:
        if status_of(exc) == 410 and "_continue" in kwargs:
            raise ContinueExpiredError(f"{what}: continue token expired", status=410) from exc
        raise
    stats.pages += 1
    body = read_json_body(resp, stats)
    if not isinstance(body, dict) or not isinstance(body.get("items") or [], list):
        raise KubernetesAPIError(f"unexpected {what} from the API: {str(body)[:200]}")
    return body
