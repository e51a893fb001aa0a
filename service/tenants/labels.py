"""The ``tenant`` label of the request metrics, with bounded cardinality.

Values: a tenant's name for the first ``cap`` distinct tenants this process serves, ``other`` for the rest,
``anonymous`` for requests without a tenant key, ``admin`` for ``/v1`` requests made with the admin token,
``none`` for requests not made as a client (admin, health, metrics) or refused before the caller was known (a
bad key). Each process keeps its own first ``cap``; a Prometheus series per tenant name costs memory in every
scrape, so the cap bounds the series.
"""

from __future__ import annotations

import threading

ANONYMOUS = "anonymous"
ADMIN = "admin"
OTHER = "other"
NONE = "none"
#: Names a tenant may not take: they are label values of their own.
RESERVED_NAMES = frozenset({ANONYMOUS, ADMIN, OTHER, NONE})


class TenantLabels:
    """Maps tenant names to label values, at most ``cap`` names (then ``other``)."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._named: set[str] = set()
        self._lock = threading.Lock()

    def label(self, tenant: str) -> str:
        if tenant in self._named:
            return tenant
        with self._lock:
            if len(self._named) < self._cap:
                self._named.add(tenant)
                return tenant
        return OTHER
