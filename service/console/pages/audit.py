"""The audit logs (admin token only): word-list changes (``GET /admin/audit``) and tenant changes
(``GET /admin/audit/tenants``)."""

from __future__ import annotations

import asyncio

from starlette.responses import Response

from service.console.context import Page, error_text, signed_in

#: Records shown of each log.
LIMIT = 200


@signed_in(admin=True)
async def audit(page: Page) -> Response:
    (lists, failure), (tenants, tenant_failure) = await asyncio.gather(
        page.api.get_json("/admin/audit", limit=LIMIT), page.api.get_json("/admin/audit/tenants", limit=LIMIT))
    return page.render("audit.html", title="Audit log", lists=(lists or {}).get("data", []),
                       tenants=(tenants or {}).get("data", []), failure=error_text(failure or tenant_failure))
