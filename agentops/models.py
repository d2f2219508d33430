from __future__ import annotations

from django.db import models
from django.db.models.functions import Now


class WebhookEvent(models.Model):
    """A provider notification, stored once by its id before it is applied (dj-stripe)."""

    id = models.CharField(primary_key=True, max_length=255)
    provider = models.CharField(max_length=50)
    type = models.CharField(max_length=100)
    payload = models.JSONField()
    received_at = models.DateTimeField(db_default=Now())
    result = models.TextField(blank=True)

    class Meta:
        ordering = ["-received_at"]

    def __str__(self) -> str:
        return f"{self.provider} {self.type} {self.id}"
