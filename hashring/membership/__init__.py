"""Membership sources: the sorted list of live members plus who "self" is."""

from hashring.membership.base import Membership
from hashring.membership.kubernetes import KubernetesMembership
from hashring.membership.static import StaticMembership

__all__ = ["KubernetesMembership", "Membership", "StaticMembership"]
