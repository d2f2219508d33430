"""The development tools: never shipped, never imported by the product.

- ``devtools.process``: start, wait for, supervise and stop processes; free ports;
- ``devtools.sandboxes``: the sandbox providers as processes of their own;
- ``devtools.stack``: the launcher (``make run``, ``make test``, ``make chaos``, ``make bench``);
- ``devtools.chaos``: the chaos run and the fault it injects into a worker's tools;
- ``devtools.bench``: the benchmark.

The wheel leaves this package out (pyproject.toml, ``packages.find``), and an import contract
keeps ``agentops``, ``journal`` and ``sandbox`` from importing it. It runs from the checkout:
``python -m devtools.stack`` and ``manage.py`` from the repository's root find it there. As a
Django app (``manage.py chaos``, ``manage.py bench``) it is installed only where
``AGENTOPS_DEVTOOLS=1``, which the launcher sets for its ``chaos`` and ``bench`` commands.
"""
