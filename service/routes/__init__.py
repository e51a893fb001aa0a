"""One router per resource (OpenAI endpoints, check, watermark, admin, health)."""
