"""Request objects that keep their unknown fields (``extra="allow"``: the routes refuse some by name and log the
others), with a cap on how many fields such an object may hold.

Why a cap: pydantic keeps every unknown field of such an object in ``model_extra``, on the event loop; a body of a
million unknown keys took 0.38 s to validate on top of 0.66 s to parse (16 MiB, issue 31's abuse suite,
bench/abuse.py ``unknown_keys``). The largest request object of the OpenAI and Anthropic APIs has under 60 fields.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

#: The most fields one request object may hold, known and unknown together (a 400 beyond).
MAX_FIELDS = 256


class OpenObject(BaseModel):
    """A request object that keeps unknown fields in ``model_extra``, at most :data:`MAX_FIELDS` fields in all.

    Raises:
        pydantic.ValidationError: (a 400 naming the object) when the object holds more than :data:`MAX_FIELDS`
            fields, before any field is validated.
    """

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _at_most_max_fields(cls, value: Any) -> Any:
        if isinstance(value, dict) and len(value) > MAX_FIELDS:
            raise ValueError(f"the object has {len(value):,} fields; at most {MAX_FIELDS} are accepted")
        return value
