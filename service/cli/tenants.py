"""``guardrail tenants``: manage tenants through a running service's admin API (docs/service.md, "Tenants").

    export GUARDRAIL_ADMIN_TOKEN=...                     # the admin token (kept out of the process list)
    guardrail tenants create app-a --default-wordlists en,house --requests-per-minute 60 --max-tokens 512
    guardrail tenants list
    guardrail tenants show app-a
    guardrail tenants set-policy app-a --allowed-wordlists en,de --no-request-terms
    guardrail tenants rotate app-a                       # prints the new key once; the old one stops at its first use
    guardrail tenants revoke app-a
    guardrail tenants delete app-a
    guardrail tenants audit --limit 20

Changes go through ``/admin/tenants`` (validated against the live lists, audited with the admin token's id),
never to the store directly. ``create`` and ``rotate`` print the key: it is shown only then.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from guardrail.params import EVASION_GUARD_MODES
from guardrail.wordlists.obfuscation import Obfuscation
from service.cli.options import obfuscation_option

_DEFAULT_URL = "http://127.0.0.1:8000"


class CliError(Exception):
    """The service refused the command or could not be reached (message for stderr; exit 2)."""


def _names(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _add_policy_options(parser: argparse.ArgumentParser) -> None:
    policy = parser.add_argument_group("policy (options left out: as the server is configured)")
    policy.add_argument("--default-wordlists", type=_names, metavar="A,B", help="lists used when a request names none "
                        "('' = none)")
    policy.add_argument("--allowed-wordlists", type=_names, metavar="A,B",
                        help="the only lists a request may name (default: any)")
    policy.add_argument("--required-wordlists", type=_names, metavar="A,B", help="lists always enforced")
    policy.add_argument("--own-wordlists", type=_names, metavar="A,B", help="stored lists the tenant reads and edits "
                        "with its own key (/admin/wordlists)")
    policy.add_argument("--no-request-terms", action="store_true", help="refuse requests' own banned_terms (403)")
    policy.add_argument("--evasion-guard", choices=EVASION_GUARD_MODES, help="default and floor of the evasion guard")
    policy.add_argument("--obfuscation", metavar="LEVEL[+markup]", type=obfuscation_option,
                        help="default and floor of the obfuscation level")
    policy.add_argument("--max-tokens", type=int, help="largest max_tokens")
    policy.add_argument("--requests-per-minute", type=int, help="rate limit: requests per minute")
    policy.add_argument("--tokens-per-minute", type=int, help="rate limit: prompt + n x max_tokens per minute")


def policy_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The policy body the options describe (only the options given)."""
    policy: dict[str, Any] = {}
    for field in ("default_wordlists", "allowed_wordlists", "required_wordlists", "own_wordlists", "evasion_guard",
                  "obfuscation", "max_tokens", "requests_per_minute", "tokens_per_minute"):
        value = getattr(args, field)
        if value is not None:
            policy[field] = str(value) if isinstance(value, Obfuscation) else value
    if args.no_request_terms:
        policy["request_terms"] = False
    return policy


def _call(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    import httpx

    token = args.admin_token or os.environ.get("GUARDRAIL_ADMIN_TOKEN")
    if not token:
        raise CliError("no admin token: set GUARDRAIL_ADMIN_TOKEN (or --admin-token)")
    try:
        response = httpx.request(method, args.url.rstrip("/") + path, json=body, timeout=30,
                                 headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError as exc:
        raise CliError(f"cannot reach {args.url}: {exc}") from None
    if response.status_code >= 400:
        try:
            error = response.json()["error"]
            detail = error["message"] + (f" ({error['param']})" if error.get("param") else "")
        except (ValueError, KeyError, TypeError):
            detail = response.text[:500]
        raise CliError(f"HTTP {response.status_code}: {detail}")
    return response.json() if response.content else None


def _human(tenant: dict[str, Any]) -> str:
    state = "revoked" if tenant["revoked"] else f"key {tenant['key_id']}"
    lines = [f"{tenant['name']}\t{state}\tversion {tenant['version']}\tpolicy {json.dumps(tenant['policy'])}"]
    if "api_key" in tenant:
        lines.append(f"api_key: {tenant['api_key']}   (shown once: store it now)")
    return "\n".join(lines)


def run_tenants(args: argparse.Namespace) -> int:
    name = getattr(args, "name", None)
    try:
        if args.action == "list":
            answer = _call(args, "GET", "/admin/tenants")
            human = "\n".join(_human(t) for t in answer["data"]) or "no tenants"
        elif args.action == "show":
            answer = _call(args, "GET", f"/admin/tenants/{name}")
            human = _human(answer)
        elif args.action == "create":
            answer = _call(args, "POST", "/admin/tenants", {"name": name, "policy": policy_from_args(args)})
            human = _human(answer)
        elif args.action == "set-policy":
            answer = _call(args, "PUT", f"/admin/tenants/{name}/policy", policy_from_args(args))
            human = _human(answer)
        elif args.action in ("rotate", "revoke"):
            answer = _call(args, "POST", f"/admin/tenants/{name}/{args.action}")
            human = _human(answer)
        elif args.action == "delete":
            _call(args, "DELETE", f"/admin/tenants/{name}")
            answer, human = {"deleted": name}, f"deleted {name}"
        else:  # audit
            answer = _call(args, "GET", f"/admin/audit/tenants?limit={args.limit}")
            human = "\n".join(f"{r['time']:.0f}\t{r['action']}\t{r['tenant']}\tv{r['version']}\tkey {r['key_id']}"
                              f"\ttoken {r['token_id']}" for r in answer["data"]) or "no changes"
    except CliError as exc:
        print(f"guardrail tenants {args.action}: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(answer, ensure_ascii=False) if args.json else human)
    return 0


def add_tenants_command(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``tenants`` (and its actions) on the ``guardrail`` parser's subparsers."""
    from service.cli.options import HelpFormatter, add_json_option

    tenants = subparsers.add_parser("tenants", formatter_class=HelpFormatter, help="manage tenants (API keys with "
                                    "a policy) through a running service's admin API",
                                    description=__doc__.splitlines()[0])
    actions = tenants.add_subparsers(dest="action", required=True)

    def action(name: str, help_: str, named: bool = True) -> argparse.ArgumentParser:
        parser = actions.add_parser(name, help=help_, description=help_, formatter_class=HelpFormatter)
        if named:
            parser.add_argument("name", help="the tenant's name")
        parser.add_argument("--url", default=os.environ.get("GUARDRAIL_URL", _DEFAULT_URL),
                            help="the service (default: GUARDRAIL_URL, else %(default)s)")
        parser.add_argument("--admin-token", default=None,
                            help="the admin token (default: GUARDRAIL_ADMIN_TOKEN; a flag shows in the process list)")
        add_json_option(parser)
        parser.set_defaults(handler=run_tenants)
        return parser

    action("list", "list the tenants (never their keys)", named=False)
    action("show", "show one tenant")
    _add_policy_options(action("create", "create a tenant and print its API key (shown once)"))
    _add_policy_options(action("set-policy", "replace a tenant's policy (options left out: the server's setting)"))
    action("rotate", "issue a new key (printed once); the old one is refused from the new one's first use")
    action("revoke", "revoke the tenant's key at once")
    action("delete", "delete the tenant and its key")
    audit = action("audit", "tenant changes, newest first", named=False)
    audit.add_argument("--limit", type=int, default=100, help="records to show")
    return tenants
