"""Examples of apps built on agentops' public extension API (``agentops.effects``) alone."""
