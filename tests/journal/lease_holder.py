"""A runner in its own process, for the lease tests: ``python -m tests.journal.lease_holder``.

Says ``ready`` once Django is set up, then obeys its parent line by line: ``acquire S``
takes the lease of the task named on the command line for S seconds and says ``acquired N``
(the token) or ``busy``; ``write`` records a step under that lease and says ``wrote N`` or
``lease_lost``; ``hold`` opens a transaction and renews the lease (the task's row is locked until it
commits), says ``holding``, and waits for ``commit``, then says ``committed`` or
``database_lost``. Start-up time never eats into a lease: nothing is acquired before
``ready``.
"""

from __future__ import annotations

import os
import sys
import uuid

import django


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings_test")
    django.setup()
    from django.db import DatabaseError, transaction

    from journal.leases import Lease, LeaseLost, lease_acquire, lease_call
    from journal.record import step_record
    from tests.journal.support import ChargeTool, Provider, charge, invoice

    task_id = uuid.UUID(sys.argv[1])
    lease: Lease | None = None
    print("ready", flush=True)
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "acquire":
            lease = lease_acquire(
                task_id=task_id, owner=f"process-{os.getpid()}", seconds=float(argument)
            )
            print(f"acquired {lease.token}" if lease else "busy", flush=True)
        elif command == "write" and lease is not None:
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
        elif command == "hold" and lease is not None:
            try:
                with transaction.atomic():
                    lease_call(lease, "journal_lease_renew")
                    print("holding", flush=True)
                    sys.stdin.readline()  # "commit"
            except DatabaseError:  # the server ended the session meanwhile
                print("database_lost", flush=True)
            else:
                print("committed", flush=True)


if __name__ == "__main__":
    main()
