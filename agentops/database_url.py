"""DATABASE_URL as Django's settings take it, one host or several.

A primary that fails over (docs/operating/many-machines.md) is reached through a URL naming
every node, ``postgres://u:p@a:5432,b:5433/db?target_session_attrs=read-write``: libpq tries
each in turn and keeps the first that takes writes. dj-database-url refuses a list of hosts,
so the list is taken out, the rest parsed by it as usual, and the hosts handed to Django as
comma-separated ``HOST`` and ``PORT``, which Django passes to psycopg as they are and libpq
reads as lists. The query (``target_session_attrs``, ``connect_timeout``...) becomes
``OPTIONS``, as for one host.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote, urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured


def database_settings(url: str, *, conn_max_age: int) -> dict[str, Any]:
    """Django's settings for one connection from `url`, whose host part may be a list."""
    parts = urlsplit(url)
    userinfo, at, hostlist = parts.netloc.rpartition("@")
    if "," not in hostlist:
        return dict(dj_database_url.parse(url, conn_max_age=conn_max_age))
    hosts, ports = [], []
    for item in hostlist.split(","):
        if item.startswith("["):  # [::1]:5432
            host, _, rest = item[1:].partition("]")
            port = rest.removeprefix(":")
        else:
            host, _, port = item.partition(":")
        if not host or (port and not port.isdigit()):
            raise ImproperlyConfigured(
                f"DATABASE_URL: {item!r} in the list of hosts is not host or host:port"
            )
        hosts.append(unquote(host))
        ports.append(port)
    single = parts._replace(netloc=f"{userinfo}{at}{hosts[0]}").geturl()
    parsed = dict(dj_database_url.parse(single, conn_max_age=conn_max_age))
    parsed["HOST"] = ",".join(hosts)
    # libpq: one port for every host, or one port per host.
    parsed["PORT"] = ",".join(ports) if any(ports) else ""
    if any(ports) and not all(ports):
        raise ImproperlyConfigured(
            "DATABASE_URL: give every host in the list a port, or none (each then uses 5432)"
        )
    return parsed


def database_url(settings_dict: dict[str, Any], *, user: str, password: str) -> str:
    """The URL of the connection `settings_dict` describes, as `user` (its list of hosts and
    its options kept): what a process started against the same database is given."""
    hosts = str(settings_dict["HOST"]).split(",")
    ports = str(settings_dict["PORT"] or "").split(",")
    if len(ports) == 1:
        ports = ports * len(hosts)
    netloc = ",".join(f"{h}:{p}" if p else h for h, p in zip(hosts, ports, strict=True))
    secret = f":{quote(password, safe='')}" if password else ""
    options = settings_dict.get("OPTIONS", {})
    query = "&".join(
        f"{key}={quote(str(options[key]), safe='')}"
        for key in ("target_session_attrs", "connect_timeout")
        if key in options
    )
    tail = f"?{query}" if query else ""
    return f"postgres://{quote(user, safe='')}{secret}@{netloc}/{settings_dict['NAME']}{tail}"
