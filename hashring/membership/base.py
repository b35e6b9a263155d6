"""The ``Membership`` protocol: where the sorted list of live members comes from."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol, runtime_checkable


@runtime_checkable
class Membership(Protocol):
    """A source of the live member list.

    * ``members()`` returns the live members, sorted, as a tuple;
    * ``self_id`` is this process's member name;
    * ``version`` changes whenever the list changes, so callers can cache
      anything derived from it (read ``version`` before ``members()``).

    A list without ``self_id`` means "this member is not ready yet": it must not
    acquire leases. Implementations never return an empty list because of an
    error; they raise :class:`hashring.errors.MembershipError` instead.
    """

    @property
    def self_id(self) -> str:
        """This member's name."""
        ...

    @property
    def version(self) -> Hashable:
        """An opaque value that changes when the member list changes."""
        ...

    def members(self) -> tuple[str, ...]:
        """The live members, sorted."""
        ...
