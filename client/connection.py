"""A connection to a raftlog group over its REST API: the members, the leader, tokens and TLS.

Any member takes any call (a follower forwards writes to the leader), so a
call goes to the leader when it is known (a write then costs no extra hop)
and to the next member when one does not answer. Every answer names the
leader; a new name is looked up in the group's status, so the connection
follows leader changes without a round trip of its own.

The token goes only to the URLs the connection was given and to members the group lists on the same
scheme (http or https, one for all the URLs given); see `Connection`.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Callable, Coroutine, Generator, Sequence
from typing import Any, TypeVar

import httpx

T = TypeVar("T")
RETRY_LATER = frozenset({502, 503, 504})  # the group has no answer now: ask again (another member, later)
BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)


class RaftlogError(Exception):
    """An answer of the group: its error code (api.md's table), message and HTTP status."""

    def __init__(self, code: str, message: str, status: int, leader: str | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.leader = leader

    @property
    def outcome_unknown(self) -> bool:
        """A write that may have been done: the group did not say (502, 504, or no answer at all)."""
        return self.status in (0, 502, 504)


class Connection:
    """`members`: client URLs of some members of the group (the others are found from them), all http
    or all https; `token`: an API token; `ca`: the CA file (or an SSLContext) of members that serve HTTPS.

    Where the token goes: to the URLs given, and to the members the group's status (`/v1/cluster`)
    lists with a client URL of the same scheme, whatever their host (the group decides who its members
    are; the scheme is the client's to keep). It never moves from https to http (nor from http to
    https): a member listed on another scheme is skipped, its URL and why kept in `skipped` and named in
    the error of a call that found no member to answer; a leader there is reached through the members
    followed (a follower forwards writes). Certificates are verified on every https call, and redirects
    are not followed (an answer of 3xx is a RaftlogError): the group never redirects."""

    def __init__(self, members: Sequence[str], *, token: str | None = None, ca: str | ssl.SSLContext | None = None,
                 timeout_s: float = 30.0) -> None:
        if not members:
            raise ValueError("a connection needs at least one member's client URL")
        self.urls = [url.rstrip("/") for url in members]
        schemes = {httpx.URL(url).scheme for url in self.urls}
        if not schemes <= {"http", "https"}:
            raise ValueError(f"members' client URLs are http or https: {self.urls}")
        if len(schemes) > 1:
            raise ValueError(f"members' client URLs mix http and https (a connection keeps to one): {self.urls}")
        self.scheme = schemes.pop()
        self.skipped: dict[str, str] = {}  # a member's URL the group listed, not followed: why
        self.leader_url: str | None = None
        self._leader_id: str | None = None
        self._next = 0
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca) if isinstance(ca, str) else (ca or True)
        auth = BearerToken(token, self.may_have_token) if token else None
        self.http = httpx.AsyncClient(verify=verify, auth=auth, follow_redirects=False, timeout=timeout_s,
                                      limits=httpx.Limits(max_connections=64, max_keepalive_connections=64))

    async def close(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- calls ---------------------------------------------------------------------------

    async def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One attempt, at the leader if known, else at the next member; raises RaftlogError for an
        error answer or none (status 0)."""
        url = self.leader_url or self.urls[self._next % len(self.urls)]
        try:
            response = await self.http.request(method, url + path, **kwargs)
        except httpx.HTTPError as exc:
            self._failed(url)
            raise RaftlogError("NETWORK_ERROR", f"no answer from {url}: {exc!r}{self._not_followed()}", 0) from None
        if response.status_code >= 300:
            error = error_of(response)
            if error.status in RETRY_LATER:
                self._failed(url)
            if error.leader is not None:
                await self.note_leader(error.leader)
            raise error
        return response

    async def retried(self, method: str, path: str, *, until_s: float = 60.0, **kwargs: Any) -> httpx.Response:
        """The call, asked again (through the next member, after a pause) while the group has no answer:
        only for calls that are safe to repeat (reads, and writes in a producer session)."""
        deadline = asyncio.get_running_loop().time() + until_s
        for attempt in range(1 << 30):
            try:
                return await self.call(method, path, **kwargs)
            except RaftlogError as exc:
                if exc.status not in (0, *RETRY_LATER) or asyncio.get_running_loop().time() >= deadline:
                    raise
            await asyncio.sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
        raise AssertionError("unreachable")

    def member(self) -> str:
        """A member to read from: reads go round the members, whoever leads."""
        return self.urls[self._next % len(self.urls)]

    def skip(self, url: str) -> None:
        """`url` failed: the next call goes to another member."""
        self._failed(url)

    def may_have_token(self, url: httpx.URL) -> bool:
        """Whether a request to `url` carries the token: a URL on the scheme of the URLs given."""
        return url.scheme == self.scheme

    def _not_followed(self) -> str:
        if not self.skipped:
            return ""
        return "; members not followed: " + ", ".join(f"{url} ({why})" for url, why in self.skipped.items())

    def _failed(self, url: str) -> None:
        if url == self.leader_url:
            self.leader_url = self._leader_id = None
        self._next += 1

    # -- the leader ----------------------------------------------------------------------

    async def note_leader(self, leader_id: str | None) -> None:
        """An answer named the leader: calls go to it from now on (its URL from the group's status)."""
        if leader_id is None or leader_id == self._leader_id:
            return
        self._leader_id = leader_id
        for url in [*self.urls]:
            try:
                status = (await self.http.get(f"{url}/v1/cluster")).json()
            except (httpx.HTTPError, ValueError):
                continue
            self.skipped = {}
            found = {m["id"]: self._followed(m.get("client_url")) for m in status.get("members", [])}
            for client_url in found.values():
                if client_url and client_url not in self.urls:
                    self.urls.append(client_url)
            self.leader_url = found.get(leader_id)
            return

    def _followed(self, client_url: object) -> str | None:
        """A listed member's URL if the connection follows it (its scheme), else None (noted in `skipped`)."""
        if not isinstance(client_url, str) or not client_url:
            return None  # a member that does not answer now
        url = client_url.rstrip("/")
        try:
            scheme = httpx.URL(url).scheme
        except httpx.InvalidURL:
            scheme = ""
        if scheme != self.scheme:
            self.skipped[url] = f"{scheme or 'no scheme'}, not {self.scheme} as the URLs given"
            return None
        return url


class BearerToken(httpx.Auth):
    """The API token as `authorization: Bearer`, on a request only if `may_have_token(its URL)`."""

    def __init__(self, token: str, may_have_token: Callable[[httpx.URL], bool]) -> None:
        self._header = f"Bearer {token}"
        self._may_have_token = may_have_token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if self._may_have_token(request.url):
            request.headers["authorization"] = self._header
        yield request


def error_of(response: httpx.Response) -> RaftlogError:
    """The error an answer of 300 or above carries (api.md's shape)."""
    try:
        error = response.json()["error"]
        return RaftlogError(error["code"], error["message"], response.status_code, error.get("leader"))
    except (ValueError, KeyError, TypeError):
        return RaftlogError("HTTP", response.text[:200], response.status_code)


class LoopThread:
    """An event loop in a thread of its own: the synchronous Producer's and Consumer's."""

    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """`coroutine`'s result, run in the loop; from any other thread."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
