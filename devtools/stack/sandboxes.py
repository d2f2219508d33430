"""The demo's sandbox providers, standing in for Stripe, mail and bookings unless the user
configured real ones."""

from __future__ import annotations

import contextlib
import secrets

from devtools.process import HOST, Popen, wait_for_port
from devtools.sandboxes import sandbox_environment
from devtools.stack.app import Child, stop_leftover_app
from devtools.stack.base import START_TIMEOUT, STOP_TIMEOUT, env_port, log, require_free_port
from devtools.stack.users import RunAs

# (name, module, port variable, default port, the setting that means "configured").
SANDBOXES = (
    ("payments", "sandbox.payments", "AGENTOPS_SANDBOX_PAYMENTS_PORT", 8101, "STRIPE_API_KEY"),
    ("mail", "sandbox.mail", "AGENTOPS_SANDBOX_MAIL_PORT", 8102, "MAIL_API_BASE"),
    ("bookings", "sandbox.bookings", "AGENTOPS_SANDBOX_BOOKINGS_PORT", 8103, "BOOKINGS_API_BASE"),
)


def start_sandboxes(
    env: dict[str, str],
    web_port: int,
    cleanup: contextlib.ExitStack,
    python: str,
    run_as: RunAs,
) -> list[tuple[str, Popen]]:
    """Start each sandbox provider the user did not replace, and point the app at it.

    They stand in for the outside world, so they run as `run_as`, the servers' user, not the
    app's: code running in the app reaches a provider over HTTP, as it would Stripe, and can
    neither trace it nor write its memory (its ledger).
    """
    started: list[tuple[str, Popen]] = []
    for name, module, port_var, default_port, configured in SANDBOXES:
        if env.get(configured):
            log(f"{configured} is set: using it, starting no {name} sandbox")
            continue
        stop_leftover_app(name, argv_has=module)
        port = env_port(port_var, default_port)
        require_free_port(port, port_var)
        argv = [python, "-m", module, "--port", str(port)]
        url = f"http://{HOST}:{port}"
        # Who it runs as replaces ours (RunAs.environment) when we are root.
        sandbox_env = {**sandbox_environment(env), **run_as.environment()}
        if name == "payments":
            # Signed with a secret made for this run: the sandbox and the app both get it,
            # through their environments.
            secret = "whsec_" + secrets.token_hex(24)
            sandbox_env["SANDBOX_WEBHOOK_SECRET"] = secret
            argv += ["--webhook-url", f"http://{HOST}:{web_port}/webhooks/stripe"]
            argv += ["--search-lag", "2"]
            env.update(
                STRIPE_API_KEY="sk_test_agentops_sandbox",
                STRIPE_API_BASE=url,
                STRIPE_WEBHOOK_SECRET=secret,
                STRIPE_SEARCH_LAG_SECONDS=env.get("STRIPE_SEARCH_LAG_SECONDS", "5"),
            )
        else:
            env[configured] = url
        child = Child(name, argv, sandbox_env, stop_timeout=STOP_TIMEOUT, run_as=run_as)
        cleanup.callback(child.stop)
        proc = child.start()
        wait_for_port(port, what=f"the {name} sandbox", timeout=START_TIMEOUT, proc=proc)
        log(f"{name} sandbox at {url} (ledger: {url}/_sandbox/ledger)")
        started.append((name, proc))
    return started
