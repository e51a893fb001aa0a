"""What a tenant may do: its policy, and how a request's own choices are checked against it.

The anonymous policy (requests without a tenant key, and holders of a ``GUARDRAIL_API_KEYS`` key) is a
:class:`TenantPolicy` built from the ``GUARDRAIL_ANONYMOUS_*`` settings (:func:`anonymous_policy`): required
lists, an obfuscation floor, an evasion-guard floor, request terms on or off; at the defaults it is the empty
policy (the server's settings, any list, request terms allowed). Its rate limits are settings too.

The evasion guard and the obfuscation level of a policy are its floor and its default: a request that names
none gets the policy's, a request may ask for a stricter one (``edit`` over ``substring``, ``masked`` over
``leet``), never a weaker one. Both are ordered: evasion guard ``off`` < ``substring`` < ``edit`` (``edit``
matches everything ``substring`` does, docs/matching.md), obfuscation by level, each catching what the
previous one does (``guardrail.wordlists.obfuscation.ObfuscationLevel``), with ``+markup`` above the same
level without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from guardrail.params import EVASION_GUARD_MODES, EvasionGuard
from guardrail.wordlists.obfuscation import Obfuscation
from service.schemas.obfuscation import ObfuscationSetting
from service.stores.store import NAME_PATTERN

ListName = Annotated[str, Field(pattern=NAME_PATTERN)]


class PolicyViolation(Exception):
    """A request asks for something its tenant's policy does not allow; ``param`` names the field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def _evasion_rank(mode: str) -> int:
    return EVASION_GUARD_MODES.index(mode) if mode in EVASION_GUARD_MODES else -1


class TenantPolicy(BaseModel):
    """One tenant's policy. Every field left out means "as the server is configured".

    Raises:
        pydantic.ValidationError: a default list the policy does not allow, a bad name or value.
    """

    model_config = ConfigDict(extra="forbid")

    default_wordlists: list[ListName] | None = Field(
        None, description="Lists enforced when a request names none; omitted = the server's default set.")
    allowed_wordlists: list[ListName] | None = Field(
        None, description="The only lists a request may name (besides the required ones); omitted = any list.")
    required_wordlists: list[ListName] = Field(
        default_factory=list, description="Lists always enforced, whatever the request names.")
    request_terms: bool = Field(True, description="Whether requests may bring their own terms (banned_terms).")
    evasion_guard: EvasionGuard | None = Field(
        None, description="Default and floor of the evasion guard (off < substring < edit); omitted = the server's "
        "setting, and requests may choose any.")
    obfuscation: ObfuscationSetting | None = Field(
        None, description="Default and floor of the obfuscation level (off < homoglyphs < leet < spaced < masked, "
        "+markup above the same level without it); omitted = the server's, and requests may choose any.")
    max_tokens: int | None = Field(None, ge=1, description="Largest max_tokens (also the default when smaller than "
                                   "the server's); omitted = the server's limit.")
    requests_per_minute: int | None = Field(None, ge=1, description="Requests to /v1 per minute; omitted = no limit.")
    tokens_per_minute: int | None = Field(
        None, ge=1, description="Prompt tokens + n x max_tokens per minute, counted when a generation is admitted "
        "(as OpenAI counts max_tokens); omitted = no limit.")
    own_wordlists: list[ListName] = Field(
        default_factory=list, description="Stored lists this tenant owns: it may read, create, change and delete "
        "them with its own key through /admin/wordlists, and /v1/check shows their terms to it. Not a bundled list "
        "or one of the server's default set (those serve everyone).")

    @model_validator(mode="after")
    def _defaults_are_allowed(self) -> TenantPolicy:
        if self.allowed_wordlists is not None and self.default_wordlists is not None:
            permitted = set(self.allowed_wordlists) | set(self.required_wordlists)
            outside = [name for name in self.default_wordlists if name not in permitted]
            if outside:
                raise ValueError(f"default_wordlists {outside} are not in allowed_wordlists or required_wordlists")
        return self

    def list_names(self) -> list[str]:
        """Every list name the policy enforces or allows (to check that they exist; ``own_wordlists`` need not:
        the tenant may create them)."""
        return [*(self.default_wordlists or []), *(self.allowed_wordlists or []), *self.required_wordlists]

    # -- applied to a request -------------------------------------------------------------------------
    def wordlists(self, requested: Sequence[str] | None, server_default: Sequence[str]) -> list[str]:
        """The lists a request enforces: the required ones, then those it names (the policy's default, else
        the server's, when it names none), duplicates dropped.

        Raises:
            PolicyViolation: ``wordlists.<i>`` names a list outside ``allowed_wordlists``.
        """
        if requested is None:
            chosen = list(self.default_wordlists if self.default_wordlists is not None else server_default)
        else:
            chosen = list(requested)
            if self.allowed_wordlists is not None:
                permitted = set(self.allowed_wordlists) | set(self.required_wordlists)
                for index, name in enumerate(chosen):
                    if name not in permitted:
                        raise PolicyViolation(f"word list {name!r} is not allowed for this API key",
                                              f"wordlists.{index}")
        return list(dict.fromkeys([*self.required_wordlists, *chosen]))

    def check_request_terms(self, count: int, param: str = "banned_terms") -> None:
        """Raises PolicyViolation naming ``param`` when the request has terms of its own and may not."""
        if count and not self.request_terms:
            raise PolicyViolation("this API key may not send its own banned terms", param)

    def evasion_guard_for(self, asked: str | None, server: str) -> str:
        """The request's evasion guard (``asked``, else the policy's, else ``server``).

        Raises:
            PolicyViolation: ``asked`` is weaker than the policy's floor.
        """
        if asked is None:
            return self.evasion_guard or server
        if self.evasion_guard is not None and _evasion_rank(asked) < _evasion_rank(self.evasion_guard):
            raise PolicyViolation(f"evasion_guard {asked!r} is weaker than this API key's {self.evasion_guard!r}",
                                  "evasion_guard")
        return asked

    def obfuscation_for(self, asked: Obfuscation | None, server: Obfuscation) -> Obfuscation:
        """The request's obfuscation setting (``asked``, else the policy's, else ``server``).

        Raises:
            PolicyViolation: ``asked`` catches less than the policy's floor.
        """
        if asked is None:
            return self.obfuscation or server
        if self.obfuscation is not None and not asked.covers(self.obfuscation):
            raise PolicyViolation(f"obfuscation '{asked}' is weaker than this API key's '{self.obfuscation}'",
                                  "obfuscation")
        return asked

    def max_tokens_limit(self, server_limit: int) -> int:
        """The largest ``max_tokens`` allowed: the policy's, within the server's."""
        return min(server_limit, self.max_tokens) if self.max_tokens is not None else server_limit

    def default_max_tokens(self, server_default: int) -> int:
        """``max_tokens`` of a request that gives none (the server's default, within the policy's limit)."""
        return min(server_default, self.max_tokens) if self.max_tokens is not None else server_default


#: The policy of a request no caller was identified for (the default anonymous policy: no floors).
ANONYMOUS_POLICY = TenantPolicy()


def anonymous_policy(*, required_wordlists: Sequence[str], min_obfuscation: Obfuscation | None,
                     evasion_guard_off: bool, server_evasion_guard: str, request_terms: bool) -> TenantPolicy:
    """The policy of anonymous callers and ``GUARDRAIL_API_KEYS`` holders, from the ``GUARDRAIL_ANONYMOUS_*``
    settings: ``required_wordlists`` always enforced, ``min_obfuscation`` the obfuscation floor (and default),
    the server's evasion guard (``server_evasion_guard``) their floor unless ``evasion_guard_off``, and
    ``request_terms`` whether they may send terms of their own.

    Raises:
        pydantic.ValidationError: a list name or obfuscation level that is not valid (names the field).
    """
    floor = None if evasion_guard_off or server_evasion_guard == "off" else server_evasion_guard
    return TenantPolicy(required_wordlists=list(required_wordlists), obfuscation=min_obfuscation,
                        evasion_guard=floor, request_terms=request_terms)
