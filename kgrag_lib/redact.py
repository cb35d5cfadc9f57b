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
- the value after a command-line flag whose name has a word ending in key, token, secret or
  password (`--api-key X`, `--api-key=X`, `--hf-token X`, `--ssl-key-password X`), in a command
  line, a spec's `?args=[--api-key,X]`, a list's repr or JSON, a YAML list, and in a list of
  words (the item after such a flag); `--max-num-batched-tokens` or `--tokenizer` are no such flag;
- the value of the API-key environment variables, and of any key the process was given
  (`hold_secret`), wherever it appears: a key of 6 characters or more anywhere, a shorter one
  where it stands as a word of its own (a 401 may echo a 3-character key).

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
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{0,31}://)[^\s'\"]*@(?=[^\s@/'\"]+(?:[/?#\s'\")\]]|$))")
# the query of a URL: every value, up to the fragment or the end of the URL
_URL_QUERY = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]{0,31}://[^\s?#'\"]*\?)([^\s#'\"]*)")
# elsewhere: keys such as api_key, apikey, api-key, key, token, access_token, password, sig, auth, code
_QUERY_SECRET = re.compile(r"(?i)([?&;][^=&#\s?]*(?:key|token|secret|pass|pwd|auth|sig|cred|session|code)[^=&#\s?]*=)"
                           r"[^&#\s'\"]*")
_AUTH_HEADER = re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=:-]{6,}")
# a flag carrying a secret: one word of its name (words split at - _ .) ends in a credential word
_FLAG_NAME = r"--?(?:[a-z0-9]+[-_.])*[a-z0-9]*(?:key|token|secret|password|passwd|pwd)(?:[-_.][a-z0-9]+)*"
_SECRET_FLAG = re.compile(rf"(?i)^{_FLAG_NAME}$")
# ... and its value: after '=', white space, a list's ',' (quoted or not, URL-encoded or not) or a
# YAML block list's next '- '; a value that is itself a long flag (--x) is the next flag, not a value
_FLAG_VALUE = re.compile(rf"(?i)(?:(?<![\w-])|(?<=%5B)|(?<=%2C))({_FLAG_NAME})(=|['\"]?(?:\s*,\s*|\s*\n\s*-\s+|\s+|%2C)['\"]?)"
                         r"(?!--)(?!\*\*\*)[^\s,'\"\[\]()&#%]+")
CREDENTIAL_KEY = re.compile(r"(?i)key|token|secret|pass|pwd|auth|sig|cred|session|code")   # a query key naming one
_HELD: set[str] = set()   # keys the process was given (hold_secret), besides the environment's


def _mask_query(m: re.Match) -> str:
    pairs = [p.split("=", 1)[0] + ("=" + MASK if "=" in p else "") for p in m.group(2).split("&")]
    return m.group(1) + "&".join(pairs)


def hold_secret(value: Any) -> None:
    """Remember a key this process was given (an API key, a server's `--api-key` value): `redact`
    masks it wherever it appears from now on."""
    if isinstance(value, str) and value.strip():
        _HELD.add(value.strip())


def forget_secrets() -> None:
    """Forget the keys `hold_secret` was given (tests: one test's key is no other test's)."""
    _HELD.clear()


def hold_flag_secrets(words: Any) -> None:
    """Hold the values of the secret-bearing flags among command-line `words` (`--api-key X`,
    `--api-key=X`): a server that echoes a short key back is then masked too."""
    words = [str(w) for w in words or []]
    for i, w in enumerate(words):
        name, eq, val = w.partition("=")
        if _SECRET_FLAG.match(name.strip()):
            hold_secret(val if eq else (words[i + 1] if i + 1 < len(words) else ""))


def _env_secrets() -> list[str]:
    """The API keys of the environment and those held, as given and stripped, longest first."""
    out: set[str] = set()
    for v in [*(os.environ.get(name) or "" for name in KEY_ENV), *_HELD]:
        for s in (v, v.strip()):
            if s:
                out.update({s, s.encode("unicode_escape").decode("ascii", "replace")})   # also as repr() shows it
    return sorted(out, key=len, reverse=True)


def _mask_secret(value: str, secret: str) -> str:
    """`secret` masked in `value`: anywhere when it has 6 characters or more (no word holds one by
    chance), else only where it stands alone (not inside a longer word, so a key 'ab' leaves 'tab')."""
    if len(secret) >= 6:
        return value.replace(secret, MASK)
    if secret not in value:
        return value
    return re.sub(rf"(?<![A-Za-z0-9_-]){re.escape(secret)}(?![A-Za-z0-9_-])", MASK, value)


def _redact_words(words: list | tuple) -> list | tuple:
    """A list of command-line words (or of anything): each item redacted, and the item after a
    secret-bearing flag (`['--api-key', 'sk-X']`) masked."""
    out: list[Any] = []
    after_flag = False
    for v in words:
        if after_flag and isinstance(v, (str, int, float)) and not isinstance(v, bool) \
                and not str(v).startswith("--"):
            out.append(MASK)
            after_flag = False
            continue
        after_flag = isinstance(v, str) and bool(_SECRET_FLAG.match(v.strip()))
        out.append(redact(v))
    return type(words)(out)


def redact(value: Any) -> Any:
    """`value` with secrets masked (see the module doc): a string, or every string in a dict, list
    or tuple (keys included); anything else as it is."""
    if isinstance(value, str):
        for secret in _env_secrets():
            value = _mask_secret(value, secret)
        value = _FLAG_VALUE.sub(rf"\1\2{MASK}", value)
        value = _USERINFO.sub(rf"\1{MASK}@", value)
        value = _URL_QUERY.sub(_mask_query, value)
        value = _QUERY_SECRET.sub(rf"\1{MASK}", value)
        return _AUTH_HEADER.sub(rf"\1\2{MASK}", value)
    if isinstance(value, dict):
        return {redact(k): redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return _redact_words(value)
    return value


def refuse_secret(value: Any, where: str, written_to: str) -> None:
    """A token that would have to be written to a file for another process to read it (a notebook's
    parameters, a study's profile, a server's `?args=[--api-key,X]`) is refused: the environment
    carries it instead."""
    import json

    if json.dumps(redact(value), default=str) != json.dumps(value, default=str):   # NaN != NaN: compare the text
        raise ConfigError(f"{where}: {redact(value)!r} carries a token (URL user:password, a query value or a "
                          f"key), which would be written into {written_to}; give the URL without it and put the "
                          "token in $KGRAG_OPENAI_API_KEY (sent as the bearer token, written nowhere); a server "
                          "kgrag starts reads its own key from its environment ($VLLM_API_KEY, $LLAMA_API_KEY) "
                          "instead of --api-key")


# the HTTP clients kgrag's backends use log each request's URL (httpx at INFO: "HTTP Request: GET
# http://host/v1/models?token=X"); a user's logging setup (a notebook's, `logging.basicConfig`)
# would print the query's token
# (a filter acts on the records of the logger it is added to, not its children's: each is named)
HTTP_LOGGERS = ("httpx", "httpx2", "httpcore", "httpcore.connection", "httpcore.http11", "httpcore2",
                "httpcore2.connection", "httpcore2.http11", "openai", "openai._base_client",
                "urllib3.connectionpool", "requests")


class RedactingFilter:
    """A logging filter that keeps a record but masks its message as `redact` does (the arguments
    are merged in first, so a URL given as an argument is masked too)."""

    def filter(self, record: Any) -> bool:
        try:
            message = record.getMessage()
        except Exception:   # a record that cannot format is logging's own error to report
            return True
        shown = redact(message)
        if shown != message:
            record.msg, record.args = shown, ()
        return True


_LOG_FILTER = RedactingFilter()


def guard_http_logs() -> None:
    """Mask secrets in what the HTTP client libraries log (idempotent)."""
    import logging

    for name in HTTP_LOGGERS:
        logger = logging.getLogger(name)
        if _LOG_FILTER not in logger.filters:
            logger.addFilter(_LOG_FILTER)
