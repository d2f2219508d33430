"""Support goodwill: store credit for a ticket and a note to the team, built on
``agentops.effects`` alone — the example to copy (README.md here walks through it).

Its declarations are in ``effects.py``; its stand-in provider, ``sandbox.py``, runs as a
process of its own (``python -m examples.support.sandbox --port N``) and imports nothing of
Django, so this module must not either."""
