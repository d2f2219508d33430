from __future__ import annotations

from django.db import models
from django.db.models.functions import Now


class WebhookEvent(models.Model):
    """A provider notification, stored once by its id as it is applied (dj-stripe).

    Only the fields the journal needs are kept (``facts``), never the whole payload: a
    PaymentIntent carries its ``client_secret``.
    """

    id = models.CharField(primary_key=True, max_length=255)
    provider = models.CharField(max_length=50)
    type = models.CharField(max_length=100)
    facts = models.JSONField(default=dict, blank=True)
    received_at = models.DateTimeField(db_default=Now())
    result = models.TextField(blank=True)

    class Meta:
        ordering = ["-received_at"]

    def __str__(self) -> str:
        return f"{self.provider} {self.type} {self.id}"
