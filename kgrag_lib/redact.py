"""Secrets in URLs are used to connect and never written or printed.

A server spec may carry a token (`openai:http://user:TOKEN@host/v1?api_key=TOKEN#model`). The
backend keeps it in memory for its requests; whatever records or shows a spec (run manifests,
run locks, identities, messages) passes it through `redact`, which masks a URL's user:password
and the values of query keys that name a credential. The rest stays as it was, so two specs
that differ only in their secrets look the same, and two that differ in anything else do not.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@?#]*@")
# query keys such as api_key, apikey, api-key, key, token, access_token, password, sig, auth
_QUERY_SECRET = re.compile(r"(?i)([?&;][^=&#\s?]*(?:key|token|secret|pass|pwd|auth|sig|cred|session)[^=&#\s?]*=)"
                           r"[^&#\s'\"]*")


def redact(value: Any) -> Any:
    """`value` with URL credentials masked: a string, or every string in a dict, list or tuple
    (keys included); anything else as it is."""
    if isinstance(value, str):
        return _QUERY_SECRET.sub(rf"\1{MASK}", _USERINFO.sub(rf"\1{MASK}@", value))
    if isinstance(value, dict):
        return {redact(k): redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v) for v in value)
    return value


def refuse_secret(value: Any, where: str, written_to: str) -> None:
    """A token that would have to be written to a file for another process to read it (a notebook's
    parameters, a study's profile) is refused: the environment carries it instead."""
    if redact(value) != value:
        from .errors import ConfigError

        raise ConfigError(f"{where}: {redact(value)!r} carries a token (URL user:password or a key in its query), "
                          f"which would be written into {written_to}; give the URL without it and put the token "
                          "in $KGRAG_OPENAI_API_KEY (sent as the bearer token, written nowhere)")
