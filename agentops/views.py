from __future__ import annotations

import logging

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from agentops.webhooks import WebhookRejected, stripe_event_receive

log = logging.getLogger(__name__)


@csrf_exempt  # authenticated by Stripe's signature over the raw body instead
@login_not_required  # the same: no session, a signature
@require_POST
def stripe_webhook(request: HttpRequest) -> HttpResponse:
    try:
        received = stripe_event_receive(
            payload=request.body, signature=request.headers.get("Stripe-Signature", "")
        )
    except WebhookRejected as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    except Exception:
        # Nothing of the event was kept (one transaction), so Stripe's retry applies it.
        log.exception("applying a Stripe event failed; it will be applied on redelivery")
        return JsonResponse(
            {"error": "the event could not be applied now; it was not kept, retry it"},
            status=500,
        )
    return JsonResponse({"duplicate": received.duplicate, "result": received.result})
