"""A runner in its own process, for the lease tests: ``python -m tests.journal.lease_holder``.

Takes the lease of the task named on the command line and says so; then, on the word
``write`` from its parent, tries to record a step under that lease and says what happened.
"""

from __future__ import annotations

import os
import sys
import uuid

import django


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings_test")
    django.setup()
    from journal.leases import LeaseLost, lease_acquire
    from journal.record import step_record
    from tests.journal.support import ChargeTool, Provider, charge, invoice

    task_id, seconds = uuid.UUID(sys.argv[1]), float(sys.argv[2])
    lease = lease_acquire(task_id=task_id, owner=f"process-{os.getpid()}", seconds=seconds)
    print(f"acquired {lease.token}" if lease else "busy", flush=True)
    if lease is None:
        return
    for line in sys.stdin:
        if line.strip() == "write":
            try:
                step = step_record(
                    lease=lease,
                    decision=charge(invoice()),
                    tools={"charge": ChargeTool(Provider())},
                )
            except LeaseLost:
                print("lease_lost", flush=True)
            else:
                print(f"wrote {step.n}", flush=True)
            return


if __name__ == "__main__":
    main()
