"""A provider that keeps the contract an ``HttpTool`` relies on
(docs/your-own/provider-contract.md).

Run: ``python -m examples.provider --port 8110 [--key-lifetime SECONDS]``.
"""
