"""Secrets in URLs and keys are used to connect and never written or printed.

A server spec may carry a token (`openai:http://user:TOKEN@host/v1?api_key=TOKEN#model`, an
Azure-Functions-style `?code=TOKEN`), and the API key lives in `$KGRAG_OPENAI_API_KEY` /
`$OPENAI_API_KEY`. The backend keeps them in memory for its requests; whatever records or shows
a spec, an error or a server's answer (run manifests, run locks, identities, sweep folders,
messages) passes it through `redact`, the one redaction every writer and error line uses. It
masks, in any string:

- a URL's user:password (a password may hold `@`, `#` or `/`: everything up to the last `@`
  of the URL's authority goes);
- every query value of a URL (`scheme://...?k=v`), whatever its key, and elsewhere the values of
  keys that name a credential (`api_key=`, `token=`, ...);
- `Bearer <token>` / `Basic <token>` (a server's error body may echo the Authorization header);
- the value of the API-key environment variables wherever it appears.

The rest stays as it was, so two specs that differ only in their secrets look the same, and two
that differ in anything else do not.
"""

from __future__ import annotations

import os
import re
from typing import Any

from .errors import ConfigError

MASK = "***"
KEY_ENV = ("KGRAG_OPENAI_API_KEY", "OPENAI_API_KEY")
# scheme://user:password@ -- the password may hold '@', '#', '/', so take the authority up to its
# last '@' before white space (a URL has no white space)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s'\"]*@(?=[^\s@/'\"]+(?:[/?#\s'\")\]]|$))")
# the query of a URL: every value, up to the fragment or the end of the URL
_URL_QUERY = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^\s?#'\"]*\?)([^\s#'\"]*)")
# elsewhere: keys such as api_key, apikey, api-key, key, token, access_token, password, sig, auth, code
_QUERY_SECRET = re.compile(r"(?i)([?&;][^=&#\s?]*(?:key|token|secret|pass|pwd|auth|sig|cred|session|code)[^=&#\s?]*=)"
                           r"[^&#\s'\"]*")
_AUTH_HEADER = re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=:-]{6,}")


def _mask_query(m: re.Match) -> str:
    pairs = [p.split("=", 1)[0] + ("=" + MASK if "=" in p else "") for p in m.group(2).split("&")]
    return m.group(1) + "&".join(pairs)


def _env_secrets() -> list[str]:
    """The API keys of the environment, as given and stripped, longest first."""
    out: set[str] = set()
    for name in KEY_ENV:
        v = os.environ.get(name) or ""
        for s in (v, v.strip()):
            if len(s) >= 6:
                out.update({s, s.encode("unicode_escape").decode("ascii", "replace")})   # also as repr() shows it
    return sorted(out, key=len, reverse=True)


def redact(value: Any) -> Any:
    """`value` with secrets masked (see the module doc): a string, or every string in a dict, list
    or tuple (keys included); anything else as it is."""
    if isinstance(value, str):
        for secret in _env_secrets():
            value = value.replace(secret, MASK)
        value = _USERINFO.sub(rf"\1{MASK}@", value)
        value = _URL_QUERY.sub(_mask_query, value)
        value = _QUERY_SECRET.sub(rf"\1{MASK}", value)
        return _AUTH_HEADER.sub(rf"\1\2{MASK}", value)
    if isinstance(value, dict):
        return {redact(k): redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v) for v in value)
    return value


def refuse_secret(value: Any, where: str, written_to: str) -> None:
    """A token that would have to be written to a file for another process to read it (a notebook's
    parameters, a study's profile) is refused: the environment carries it instead."""
    import json

    if json.dumps(redact(value), default=str) != json.dumps(value, default=str):   # NaN != NaN: compare the text
        raise ConfigError(f"{where}: {redact(value)!r} carries a token (URL user:password, a query value or a "
                          f"key), which would be written into {written_to}; give the URL without it and put the "
                          "token in $KGRAG_OPENAI_API_KEY (sent as the bearer token, written nowhere)")
