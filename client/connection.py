"""A connection to a raftlog group over its REST API: the members, the leader, tokens and TLS.

Any member takes any call (a follower forwards writes to the leader), so a
call goes to the leader when it is known (a write then costs no extra hop)
and to the next member when one does not answer. Every answer names the
leader; a new name is looked up in the group's status, so the connection
follows leader changes without a round trip of its own.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Coroutine, Sequence
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
    """`members`: client URLs of some members of the group (the others are found from them);
    `token`: an API token; `ca`: the CA file (or an SSLContext) of members that serve HTTPS."""

    def __init__(self, members: Sequence[str], *, token: str | None = None, ca: str | ssl.SSLContext | None = None,
                 timeout_s: float = 30.0) -> None:
        if not members:
            raise ValueError("a connection needs at least one member's client URL")
        self.urls = [url.rstrip("/") for url in members]
        self.leader_url: str | None = None
        self._leader_id: str | None = None
        self._next = 0
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca) if isinstance(ca, str) else (ca or True)
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.AsyncClient(verify=verify, headers=headers, timeout=timeout_s,
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
            raise RaftlogError("NETWORK_ERROR", f"no answer from {url}: {exc!r}", 0) from None
        if response.status_code >= 400:
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
            found = {m["id"]: m.get("client_url") for m in status.get("members", [])}
            for client_url in found.values():
                if client_url and client_url.rstrip("/") not in self.urls:
                    self.urls.append(client_url.rstrip("/"))
            leader = found.get(leader_id)
            self.leader_url = leader.rstrip("/") if leader else None
            return


def error_of(response: httpx.Response) -> RaftlogError:
    """The error an answer of 400 or above carries (api.md's shape)."""
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
