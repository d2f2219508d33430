"""The sandbox providers the installed apps declare (``agentops.effects.Sandbox``: the shipped
kinds bring stand-ins for Stripe, mail and bookings), started unless the user configured
the real ones."""

from __future__ import annotations

import contextlib
import json
import secrets

from devtools.process import HOST, Popen, wait_for_port
from devtools.sandboxes import sandbox_environment
from devtools.stack.app import Child, manage_output, stop_leftover_app
from devtools.stack.base import START_TIMEOUT, STOP_TIMEOUT, env_port, log, require_free_port
from devtools.stack.users import RunAs


def start_sandboxes(
    env: dict[str, str],
    web_port: int,
    cleanup: contextlib.ExitStack,
    python: str,
    run_as: RunAs,
    app_as: RunAs,
) -> list[tuple[str, Popen]]:
    """Start each declared sandbox provider the user did not replace, and point the app at it.

    They stand in for the outside world, so they run as `run_as`, the servers' user, not the
    app's: code running in the app reaches a provider over HTTP, as it would Stripe, and can
    neither trace it nor write its memory (its ledger). What they are is asked of the app
    (``manage.py sandboxes``, run as `app_as`).
    """
    declared = json.loads(manage_output(["sandboxes"], env, python, app_as))
    started: list[tuple[str, Popen]] = []
    for sandbox in declared:
        name, module, unless = sandbox["name"], sandbox["module"], sandbox["unless"]
        if env.get(unless):
            log(f"{unless} is set: using it, starting no {name} sandbox")
            continue
        stop_leftover_app(name, argv_has=module)
        port_var = sandbox["port_setting"] or f"AGENTOPS_SANDBOX_{name.upper()}_PORT"
        port = env_port(port_var, int(sandbox["port"]))
        require_free_port(port, port_var)
        url = f"http://{HOST}:{port}"
        # A secret made for this run, for what the sandbox posts back (signed webhooks): the
        # sandbox and the app both get it, through their environments.
        secret = "whsec_" + secrets.token_hex(24)
        fill = {"url": url, "web": f"http://{HOST}:{web_port}", "secret": secret}
        argv = [python, "-m", module, "--port", str(port)]
        argv += [arg.format(**fill) for arg in sandbox["args"]]
        # Who it runs as replaces ours (RunAs.environment) when we are root.
        sandbox_env = {**sandbox_environment(env), **run_as.environment()}
        sandbox_env["SANDBOX_WEBHOOK_SECRET"] = secret
        env.update({k: v.format(**fill) for k, v in sandbox["settings"].items()})
        for setting, value in sandbox["defaults"].items():
            env.setdefault(setting, value.format(**fill))
        child = Child(name, argv, sandbox_env, stop_timeout=STOP_TIMEOUT, run_as=run_as)
        cleanup.callback(child.stop)
        proc = child.start()
        wait_for_port(port, what=f"the {name} sandbox", timeout=START_TIMEOUT, proc=proc)
        log(f"{name} sandbox at {url} (ledger: {url}/_sandbox/ledger)")
        started.append((name, proc))
    return started
