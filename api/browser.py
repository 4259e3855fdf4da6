"""What a web page in someone's browser may make a member do: nothing it was not asked to.

A member on loopback without tokens trusts whoever reaches its port, and a
browser on the same machine does: a page on any site may POST to 127.0.0.1
(a form, or a fetch with a text/plain body, goes without asking first), and a
name the attacker points at 127.0.0.1 makes the browser treat the member as
that site's own (DNS rebinding: etcd's CVE-2018-1098). So, on the client port:

- a request on a plaintext port must name one of `allowed_hosts` in its Host
  header, else 421 HOST_NOT_ALLOWED, as etcd's host whitelist answers (over TLS
  the certificate binds the name; health probes, which name a pod's address,
  are exempt). A proxy's X-Forwarded-Proto cannot lift it: the scheme checked
  is the port's own;
- a request that changes state and carries an Origin must come from the
  member's own origin (the scheme and Host it was sent to) or one of
  `allowed_origins`, else 403 ORIGIN_NOT_ALLOWED: browsers send Origin with
  every cross-site POST and DELETE;
- routes that take JSON take only JSON (api.public), which a page on another
  site cannot send without a CORS preflight that no answer here grants;
- every answer forbids framing and content sniffing and carries a
  Content-Security-Policy: a page (`/`, `/docs`) names its inline scripts and
  styles by hash (`page_policy`), every other answer allows nothing.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from raftlog.api.auth import SAFE_METHODS
from raftlog.api.errors import ApiError
from raftlog.api.request_checks import Refusal, RequestHead
from raftlog.raft.messages import Code

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
ANY_HOST = "*"
PROBE_PATHS = frozenset({"/healthz", "/readyz"})
CSP = b"content-security-policy"
API_POLICY = b"default-src 'none'; frame-ancestors 'none'"
ALWAYS = [(b"x-frame-options", b"DENY"), (b"x-content-type-options", b"nosniff")]
INLINE = re.compile(r"<(script|style)>(.*?)</\1>", re.DOTALL)


def host_name(host: str) -> str:
    """The name in a Host header or URL authority, without its port or IPv6 brackets, lower case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def page_policy(html: str, *, sources: str = "") -> str:
    """The Content-Security-Policy of a page: its own inline scripts and styles (by SHA-256), calls to
    this member only, never framed. `sources` adds hosts it loads scripts and styles from."""
    hashes: dict[str, list[str]] = {"script": [], "style": []}
    for kind, text in INLINE.findall(html):
        digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
        hashes[kind].append(f"'sha256-{digest}'")
    extra = f" {sources}" if sources else ""
    return (f"default-src 'none'; script-src {' '.join(hashes['script'])}{extra}; "
            f"style-src {' '.join(hashes['style'])}{extra}; img-src 'self' data:{extra}; connect-src 'self'; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


class BrowserGuard:
    """The Host and Origin check of the client port (an api.request_checks check). `allowed_hosts`
    None: any Host. `plaintext`: the port serves without TLS, so every request but the probes names
    an allowed Host, whatever its headers say of a scheme (a proxy's are honoured only from
    `trusted_proxies`, and then only name the scheme its Origin is compared with)."""

    def __init__(self, allowed_hosts: Iterable[str] | None, allowed_origins: Iterable[str], *,
                 plaintext: bool) -> None:
        self.hosts = None if allowed_hosts is None else frozenset(host_name(h).encode() for h in allowed_hosts)
        self.origins = frozenset(o.rstrip("/").lower().encode() for o in allowed_origins)
        self.plaintext = plaintext

    def __call__(self, scope: Scope, head: RequestHead) -> Refusal | None:
        host, origin = head.host, head.origin
        if (self.hosts is not None and self.plaintext and scope["path"] not in PROBE_PATHS
                and (host is None or host_name(host.decode("latin-1")).encode() not in self.hosts)):
            shown = "no Host header" if host is None else f"Host {host.decode('latin-1')[:100]!r}"
            return Refusal(ApiError(Code.HOST_NOT_ALLOWED, f"{shown} is not a name this member answers to; set "
                                    "allowed_hosts to add one"), "host")
        if origin is not None and scope["method"] not in SAFE_METHODS:
            own = scope["scheme"].encode() + b"://" + (host or b"").lower()
            given = origin.rstrip(b"/").lower()
            if given != own and given not in self.origins:
                return Refusal(ApiError(Code.ORIGIN_NOT_ALLOWED, f"{scope['method']} from a page of Origin "
                                        f"{origin.decode('latin-1')[:100]!r}: only this member's own pages and "
                                        "allowed_origins may change state"), "origin")
        return None


class GuardedHeaders:
    """ASGI middleware: every answer of the client port carries guarded_headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_guarded(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": guarded_headers(message.get("headers", ()))}
            await send(message)

        await self.app(scope, receive, send_guarded)


def guarded_headers(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """An answer's headers as every answer of the client port carries them: its own, the API's
    Content-Security-Policy unless it has one, no framing, no sniffing."""
    headers = list(headers)
    if not any(name.lower() == CSP for name, _ in headers):
        headers.append((CSP, API_POLICY))
    return headers + ALWAYS
