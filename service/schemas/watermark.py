"""Bodies of ``POST /v1/watermark/detect``."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from service.schemas.text import Text


class WatermarkDetectRequest(BaseModel):
    """Exactly one of ``text`` (tokenized with the served model's tokenizer) or ``token_ids``."""

    model_config = ConfigDict(extra="forbid")

    text: Text | None = Field(None, max_length=1_000_000, description="A completion (without the prompt).")
    token_ids: list[Annotated[int, Field(ge=0)]] | None = Field(None, max_length=100_000)
    z_threshold: float = Field(4.0, gt=0, le=100, description="Decision threshold on the z-score.")

    @model_validator(mode="after")
    def _one_input(self) -> WatermarkDetectRequest:
        if (self.text is None) == (self.token_ids is None):
            raise ValueError("give exactly one of text or token_ids")
        return self


class WatermarkDetectResponse(BaseModel):
    prediction: bool = Field(description="z_score > z_threshold: the text carries the watermark.")
    z_score: float
    p_value: float = Field(description="One-sided p-value of z_score.")
    green_fraction: float
    tokens_scored: int
    z_threshold: float
