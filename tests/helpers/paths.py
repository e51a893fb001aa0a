"""Where things are, for tests in any folder: the repository root and the shared test data (tests/data)."""

import json
from pathlib import Path

#: The repository root (this file is tests/helpers/paths.py).
ROOT = Path(__file__).resolve().parents[2]
#: The shared test data: prompts that elicit the bundled lists' terms, obfuscation and evasion cases.
DATA = ROOT / "tests" / "data"


def load_data(name):
    """The JSON document ``tests/data/<name>`` (UTF-8). Raises FileNotFoundError if it is not there."""
    return json.loads((DATA / name).read_text(encoding="utf-8"))
