"""Tenants (admin token only): list, create (the key shown once), change the policy, rotate and revoke the key,
through ``/admin/tenants``."""

from __future__ import annotations

from typing import Any

from starlette.datastructures import ImmutableMultiDict
from starlette.responses import Response

from service.console.api import ApiError, api_path
from service.console.context import Page, error_text, signed_in

EVASION_GUARDS = ("off", "substring", "edit")
OBFUSCATION_LEVELS = ("off", "homoglyphs", "leet", "spaced", "masked", "off+markup", "homoglyphs+markup",
                      "leet+markup", "spaced+markup", "masked+markup")
#: List fields of a policy, as comma-separated names in the form.
LIST_FIELDS = ("default_wordlists", "allowed_wordlists", "required_wordlists", "own_wordlists")
#: Written in a list field for "no list at all" (blank: the field is left out, the server's setting applies).
NO_LIST = "-"


def policy_of(form: ImmutableMultiDict) -> dict[str, Any]:
    """The policy a form describes, as ``PUT /admin/tenants/{name}/policy`` takes it: a field left blank is left
    out (the server's setting applies). What is valid is the API's to say (its 400 names the field)."""
    policy: dict[str, Any] = {}
    for field in LIST_FIELDS:
        value = (form.get(field) or "").strip()
        if value == NO_LIST:
            policy[field] = []
        elif value:
            policy[field] = [name.strip() for name in value.split(",") if name.strip()]
    policy["request_terms"] = form.get("request_terms") == "on"
    for field in ("evasion_guard", "obfuscation"):
        if form.get(field):
            policy[field] = form.get(field)
    for field in ("max_tokens", "requests_per_minute", "tokens_per_minute"):
        value = (form.get(field) or "").strip()
        if value:
            policy[field] = int(value) if value.lstrip("-").isdigit() else value
    return policy


def _form_values(policy: dict[str, Any]) -> dict[str, str]:
    """A stored policy as the form shows it."""
    values: dict[str, str] = {}
    for field in LIST_FIELDS:
        names = policy.get(field)
        # default and allowed lists: None is "the server's", [] is "none"; required and own lists default to [].
        empty = NO_LIST if field in ("default_wordlists", "allowed_wordlists") else ""
        values[field] = "" if names is None else (", ".join(names) if names else empty)
    for field in ("evasion_guard", "obfuscation", "max_tokens", "requests_per_minute", "tokens_per_minute"):
        values[field] = "" if policy.get(field) is None else str(policy[field])
    values["request_terms"] = "on" if policy.get("request_terms", True) else ""
    return values


def _render(page: Page, template: str, status: int = 200, **context: Any) -> Response:
    return page.render(template, status, evasion_guards=EVASION_GUARDS, levels=OBFUSCATION_LEVELS, no_list=NO_LIST,
                       **context)


@signed_in(admin=True)
async def index(page: Page) -> Response:
    """Every tenant; ``POST``: create one (its key is shown once, on this answer only)."""
    created = error = None
    status = 200
    values = _form_values({})
    if page.request.method == "POST":
        values = dict(page.form.items())
        answer = await page.api.call("POST", "/admin/tenants",
                                     json={"name": (page.form.get("name") or "").strip(),
                                           "policy": policy_of(page.form)})
        if answer.is_success:
            created = answer.json()
            values = _form_values({})
        else:
            error, status = error_text(ApiError.of(answer)), answer.status_code
    data, failure = await page.api.get_json("/admin/tenants")
    return _render(page, "tenants.html", status, title="Tenants", tenants=(data or {}).get("data", []),
                   failure=error_text(failure), created=created, error=error, values=values)


@signed_in(admin=True)
async def tenant(page: Page) -> Response:
    """One tenant; ``POST`` ``action``: ``policy`` (replace it), ``rotate`` (a new key, shown once) or ``revoke``."""
    name = page.request.path_params["name"]
    key = notice = error = None
    status = 200
    values = None
    if page.request.method == "POST":
        action = page.form.get("action")
        if action == "policy":
            version = page.form.get("version")
            answer = await page.api.call("PUT", api_path("admin", "tenants", name, "policy"), json=policy_of(page.form),
                                         headers={"If-Match": f'"v{version}"'} if version else None)
            if answer.is_success:
                notice = "Policy saved."
            else:
                values = dict(page.form.items())
        elif action in ("rotate", "revoke"):
            answer = await page.api.call("POST", api_path("admin", "tenants", name, action))
            if answer.is_success:
                key = answer.json().get("api_key")
                notice = ("Key rotated: the old key is refused from the new key's first use on (revoke ends every key "
                          "at once)." if key else "Key revoked.")
        else:
            return page.render("error.html", 400, title=f"Tenant {name}", message="Unknown action.")
        if not answer.is_success:
            failure = ApiError.of(answer)
            error, status = error_text(failure), answer.status_code
            if answer.status_code == 412:
                error = f"Conflict: the tenant changed since this page was shown; nothing was written ({error})."
    data, failure = await page.api.get_json(api_path("admin", "tenants", name))
    if failure is not None:
        return page.render("error.html", failure.status, title=f"Tenant {name}", message=error_text(failure))
    return _render(page, "tenant.html", status, title=f"Tenant {name}", tenant=data, key=key, notice=notice,
                   error=error, values=values or _form_values(data["policy"]))
