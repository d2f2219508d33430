"""What the task page and the API show of a task's notifications."""

from __future__ import annotations

import uuid

from agentops.notifications.models import Delivery


def deliveries_of(*, task_id: uuid.UUID) -> list[Delivery]:
    """The task's deliveries, oldest first: one query, through (task, id)."""
    return list(Delivery.objects.filter(task_id=task_id).defer("payload").order_by("id"))
