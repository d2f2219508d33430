"""agentops as an MCP server (issue 18; docs/mcp.md): the installed
apps' intents as tools whose keys the caller cannot break, three states on the wire, and the
journal as the agent's memory. ``manage.py mcp_server`` serves it on stdio (as a configured API
client) or on streamable HTTP (loopback by default; each request with a client's token carrying
the ``mcp`` scope).

- ``services``: an intent asked for — its arguments normalised and checked, its key derived
  from the effect's business object, the system of record read, one task started for it
  however many callers ask, and the answer waited for (bounded);
- ``selectors``: what the journal knows of an effect, an object, a reference — three states,
  with evidence or the reason, and what is being checked and when;
- ``wire``: the answer as MCP carries it: ``structuredContent`` under an ``outputSchema``, a
  text a model cannot misread, and each tool's annotations from its declaration;
- ``server`` and ``http``: the SDK's server, its handlers (which only parse, call a service or
  selector in a thread, and answer), and the token gate in front of streamable HTTP.
"""
