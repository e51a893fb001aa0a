"""The OpenAI list envelope ``{"object": "list", "data": [...]}`` of every listing endpoint (``/v1/models``,
``/admin/wordlists``, ``/admin/audit``, ``/admin/tenants``, ``/admin/audit/tenants``).

Each endpoint subclasses ``ListOf[Item]`` under its own name (``class WordListIndex(ListOf[WordListSummary])``):
the OpenAPI document keeps one stable schema name per endpoint rather than pydantic's ``ListOf_Item_``.
"""

from __future__ import annotations

from typing import Generic, Literal, TypeVar

from pydantic import BaseModel

Item = TypeVar("Item", bound=BaseModel)


class ListOf(BaseModel, Generic[Item]):
    """``data``: the items, in the endpoint's order (its docstring says which)."""

    object: Literal["list"] = "list"
    data: list[Item]
