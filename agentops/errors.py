"""Error reports that never show a credential, even with DEBUG on.

Django's own filter hides settings whose names look secret (KEY, PASS, TOKEN, ...), but
not ``DATABASE_URL`` or ``REDIS_URL``, whose values carry passwords; and with DEBUG on it
shows every local variable of the traceback. This filter also hides settings, request
headers and local variables whose names concern connections, and any value that embeds a
password (``scheme://user:password@host``, ``password=...``), wherever it appears.
"""

from __future__ import annotations

import re
from collections.abc import ItemsView
from typing import Any

from django.http import HttpRequest
from django.views.debug import SafeExceptionReporterFilter

CREDENTIAL_IN_VALUE = re.compile(r"://[^/\s:@]*:[^/\s@]+@|password\s*=\s*\S", re.IGNORECASE)


class CredentialFilter(SafeExceptionReporterFilter):
    hidden_settings = re.compile(
        "API|TOKEN|KEY|SECRET|PASS|SIGNATURE|HTTP_COOKIE|AUTHORIZATION|CREDENTIAL"
        "|DATABASE|REDIS|RQ_QUEUES|_URL$|^URL$|DSN",
        flags=re.IGNORECASE,
    )

    def cleanse_setting(self, key: Any, value: Any) -> Any:
        cleansed = super().cleanse_setting(key, value)
        # str(): lazy settings (django-axes) pass for strings but the regex wants a real one.
        if isinstance(cleansed, str) and CREDENTIAL_IN_VALUE.search(str(cleansed)):
            return self.cleansed_substitute
        return cleansed

    def get_traceback_frame_variables(
        self, request: HttpRequest | None, tb_frame: Any
    ) -> ItemsView[str, Any]:
        variables = super().get_traceback_frame_variables(request, tb_frame)
        # Locals are judged like settings: by their name and by what they hold.
        return {name: self.cleanse_setting(name, value) for name, value in variables}.items()
