"""The HTTP API for other programs (issue 17), at ``/api/v1/``: start a task, read it, and do
what an operator does to it, as JSON, with a token per client (docs/api.md).

Built on django-ninja rather than Django REST framework: one small dependency on pydantic
(already here) instead of a framework with its own request, permission and throttle
classes; the request and response schemas *are* the type hints of function views (no
serializer classes to keep in step with them), and the OpenAPI schema is generated from
them (``/api/v1/openapi.json``). It is a door like the operators' pages: views parse, call
one service, and answer; the services are the pages' own (``agentops.operators.services``,
``agentops.effects.task_start``), so the API can do nothing a page cannot, and everything
it does is journaled as ``api:<client>``.

- ``auth``: client tokens (Bearer; never a session cookie), scopes, the rate limit;
- ``idempotency``: the ``Idempotency-Key`` header, stored per client and key in PostgreSQL;
- ``services``: starting a task, unless its once-only effect is already done;
- ``selectors`` and ``schemas``: what a task looks like from outside;
- ``views`` and ``urls``: the endpoints.
"""
