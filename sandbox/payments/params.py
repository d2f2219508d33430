"""Request parameters shared by the payments resources: integers, metadata, and the
metadata key that carries the caller's reference.
"""

from __future__ import annotations

import re

from sandbox.wire import JSON, invalid

REFERENCE_METADATA_KEY = "agentops_key"


def int_param(params: JSON, name: str, *, required: bool) -> int | None:
    raw = params.get(name)
    if raw is None or raw == "":
        if required:
            raise invalid(f"Missing required param: {name}.", name, "parameter_missing")
        return None
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        raise invalid(f"Invalid integer: {raw}", name, "parameter_invalid_integer")
    try:
        if isinstance(raw, str) and not re.fullmatch(r"-?\d+", raw):
            raise ValueError(raw)
        return int(raw)
    except ValueError as exc:
        raise invalid(f"Invalid integer: {raw}", name, "parameter_invalid_integer") from exc


def metadata_param(params: JSON) -> dict[str, str]:
    raw = params.get("metadata", {})
    if raw == "":
        return {}
    if not isinstance(raw, dict):
        raise invalid("Invalid object", "metadata")
    return {str(k): str(v) for k, v in raw.items()}
