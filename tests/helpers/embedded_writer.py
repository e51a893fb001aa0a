"""A process of its own over an embedded store, for tests/service/test_embedded_store_durability.py.

``python -m helpers.embedded_writer DATA_DIR hold`` (from tests/): open the store, print ``ready <pid>``, keep it
open until stdin closes. ``... DATA_DIR loop ROUND``: open the store, print ``ready <pid>``, then write
lists forever (five names, every seventh change a delete), printing one JSON line per change after
``write`` returned: the acknowledgement the test holds the store to after killing this process with
SIGKILL. Opening a store another process holds prints the error on stderr and exits 2.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from guardrail.wordlists.wordlist import wordlist_from_terms
from service.stores.embedded import DataDirLocked, EmbeddedStore
from service.stores.store import deletion, replacement

#: Small, so that the audit file is compacted (rewritten) every 100 changes while the test kills.
AUDIT_MAX_RECORDS = 50


def main(argv: list[str]) -> int:
    data_dir, mode = Path(argv[1]), argv[2]
    try:
        store = EmbeddedStore(data_dir, audit_max_records=AUDIT_MAX_RECORDS)
    except DataDirLocked as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"ready {os.getpid()}", flush=True)
    if mode == "hold":
        sys.stdin.read()
        store.close()
        return 0
    round_ = int(argv[3])
    i = 0
    while True:
        name = f"list{i % 5}"
        if i % 7 == 6:
            deleted: list[int | None] = []

            def delete(current, deleted=deleted):
                deleted.append(current.version if current else None)
                return deletion(current) if current else None

            store.write(name, delete, None, "writer")
            ack = {"list": name, "deleted_version": deleted[-1]}  # the version the delete removed
        else:
            terms = [f"r{round_}w{i}", f"term{i % 3}"]
            wordlist = wordlist_from_terms(terms, name=name)
            stored = store.write(name, lambda current, wl=wordlist: replacement(current, wl), None, "writer")
            ack = {"list": name, "version": stored.version, "terms": terms}
        print(json.dumps(ack), flush=True)
        i += 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
