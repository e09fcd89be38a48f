"""A claimer process for the cross-process leasing test (not a test module).

`python -m tests.store.claimer URL OWNER` connects, prints "ready", waits for a line on
stdin (the start signal, so two processes begin together), then claims runs five at a time
until none is due and prints the claimed ids as one JSON line.
"""

from __future__ import annotations

import json
import sys

from reconciler.adapters.db import Leases, create_db_engine
from reconciler.adapters.db.models import Run
from reconciler.adapters.db.sessions import SystemClock


def main(url: str, owner: str) -> None:
    engine = create_db_engine(url)
    leases = Leases(engine, clock=SystemClock())
    with engine.connect():
        pass  # connect before the start signal
    print("ready", flush=True)
    sys.stdin.readline()
    claimed: list[str] = []
    while batch := leases.claim_due(Run, owner=owner, limit=5, lease_seconds=600):
        claimed.extend(row_id for row_id, _ in batch)
    print(json.dumps(claimed), flush=True)
    engine.dispose()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
