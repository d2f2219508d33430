from __future__ import annotations

import logging

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.log import log_response
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from agentops.effects import provider_event_observed
from commerce.webhooks import (
    MAX_BODY_BYTES,
    WebhookRejected,
    WebhookTooLarge,
    stripe_event_receive,
)

log = logging.getLogger(__name__)


def _body(request: HttpRequest) -> bytes:
    """The raw body, at most ``MAX_BODY_BYTES``: a larger declared length is refused before
    a byte is read, and a body of no declared length (chunked) is read only one byte past
    the limit. Not ``request.body``: past Django's DATA_UPLOAD_MAX_MEMORY_SIZE it raises."""
    too_large = WebhookTooLarge(f"the body is too large: at most {MAX_BODY_BYTES} bytes")
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > MAX_BODY_BYTES:
        raise too_large
    payload = request.read(MAX_BODY_BYTES + 1)
    if len(payload) > MAX_BODY_BYTES:
        raise too_large
    return payload


@csrf_exempt  # authenticated by Stripe's signature over the raw body instead
@login_not_required  # the same: no session, a signature
@require_POST
def stripe_webhook(request: HttpRequest) -> HttpResponse:
    try:
        received = stripe_event_receive(
            payload=_body(request), signature=request.headers.get("Stripe-Signature", "")
        )
    except WebhookRejected as exc:
        provider_event_observed(provider="stripe", outcome="refused")
        response = JsonResponse({"error": str(exc)}, status=exc.status)
        # One line saying why, in place of Django's own "Bad Request" line; never a traceback.
        log_response(
            "Stripe webhook refused (%s): %s",
            exc.status,
            str(exc),
            response=response,
            request=request,
            logger=log,
            level="warning",
        )
        return response
    except Exception:
        # Nothing of the event was kept (one transaction), so Stripe's retry stores it.
        provider_event_observed(provider="stripe", outcome="failed")
        log.exception("storing a Stripe event failed; it will be stored on redelivery")
        return JsonResponse(
            {"error": "the event could not be stored now; it was not kept, retry it"},
            status=500,
        )
    # Stored: a worker verifies and applies it (commerce.webhooks.stripe_event_apply).
    return JsonResponse(
        {"event": received.event, "duplicate": received.duplicate, "result": received.result}
    )
