"""The peer client: raft's Transport over HTTP/2 (cleartext with prior knowledge, or mutual
TLS with ALPN), and the calls a node's public API makes to its peers (forwarded appends,
read index, status). Every call carries the cluster secret, when there is one.

Per peer there are two connections, so a large body never waits behind, or
delays, a heartbeat: `control` for votes, heartbeats, transfers and small API
calls, `data` for pushes and forwarded appends, whose bodies go in chunks. A
peer that is down, slow or answers garbage raises PeerUnavailable: a failed
call the caller retries on its own timer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

import httpx

from api.bodies import BATCH_CONTENT_TYPE, encode_bodies
from api.errors import ApiError
from api.peer_codec import PeerMessageError, decode_message, encode_message, encode_push
from raft.config import Peer
from raft.messages import (
    Code,
    FetchRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    PushRequest,
    PushResponse,
    TransferRequest,
    TransferResponse,
    VoteRequest,
    VoteResponse,
)
from raft.transport import PeerUnavailable

log = logging.getLogger("raftlog.api.peers")

UNREACHABLE_WARN_S = 10.0
RECONNECT_AFTER_S = 3.0
# A connection with no call under way and no answer for this long is replaced before its next call.
# httpcore finds a closed idle HTTP/2 connection only when a call fails on it, so the first call to a
# member that had restarted failed (a forwarded append answered 502, an unknown outcome, though it was
# never sent). No member restarts this fast, so a connection that answered within it is the process
# that serves now. A failed call is never sent again: the peer may have acted on it.
IDLE_RECONNECT_S = 0.25

M = TypeVar("M")
CHUNK_BYTES = 64 << 10  # httpx sends one large bytes body in quadratic time: stream it in chunks
PEER_ERROR_STATUS = 409  # a peer route's answer that is an error of the call, not of the transport


class PeerClient:
    def __init__(self, self_id: str, peers: Sequence[Peer], *, rpc_timeout_ms: int,
                 push_timeout_ms: int, wait_timeout_ms: int, secret: bytes | None = None,
                 tls: ssl.SSLContext | None = None,
                 on_push: Callable[[str, float, int], None] | None = None) -> None:
        self.self_id = self_id
        self._headers = {"authorization": f"Bearer {secret.decode()}"} if secret else {}  # h2 never indexes it
        self._tls = tls
        self.on_push = on_push  # (peer, seconds, bytes) of each answered push, for metrics
        self.wait_timeout_s = wait_timeout_ms / 1000  # calls that wait for a quorum on the leader
        self.addresses = {p.id: p.address for p in peers if p.id != self_id}
        self._timeouts_ms = (rpc_timeout_ms, push_timeout_ms)  # control, data
        self._control = {peer: self._client(address, rpc_timeout_ms) for peer, address in self.addresses.items()}
        self._data = {peer: self._client(address, push_timeout_ms) for peer, address in self.addresses.items()}
        self.last_contact: dict[str, float] = {}  # monotonic time of the last answer from a peer
        self._answered: dict[tuple[str, str], float] = {}  # ... over each of its two connections
        self._warned: dict[str, float] = {}  # when each silent peer was last warned about
        self._reconnected: dict[tuple[str, str], float] = {}
        self._inflight: dict[tuple[str, str], int] = {}  # calls under way on each connection
        self._opened: dict[tuple[str, str], float] = {}  # when each connection's client was last replaced
        self._closing: set[asyncio.Task[None]] = set()
        self._started = time.monotonic()

    async def close(self) -> None:
        for client in (*self._control.values(), *self._data.values()):
            await client.aclose()
        await asyncio.gather(*self._closing, return_exceptions=True)

    # -- raft.transport.Transport ------------------------------------------------------

    async def vote(self, peer_id: str, request: VoteRequest) -> VoteResponse:
        return self._decode(VoteResponse, await self._post(peer_id, "/raft/vote", encode_message(request)))

    async def heartbeat(self, peer_id: str, request: HeartbeatRequest) -> HeartbeatResponse:
        data = await self._post(peer_id, "/raft/heartbeat", encode_message(request))
        return self._decode(HeartbeatResponse, data)

    async def push(self, peer_id: str, request: PushRequest) -> PushResponse:
        parts = encode_push(request)  # copied now, before the mapped file can change
        started = time.monotonic()
        data = await self._post(peer_id, "/raft/push", _chunks(parts), client=self._data[peer_id])
        if self.on_push is not None:
            self.on_push(peer_id, time.monotonic() - started, len(parts[1]))
        return self._decode(PushResponse, data)

    async def transfer(self, peer_id: str, request: TransferRequest) -> TransferResponse:
        data = await self._post(peer_id, "/raft/transfer", encode_message(request))
        return self._decode(TransferResponse, data)

    async def fetch(self, peer_id: str, request: FetchRequest) -> bytes:
        return await self._post(peer_id, "/raft/fetch", encode_message(request))

    # -- the public API's calls to other members ----------------------------------------

    async def forward_append(self, leader_id: str, bodies: Sequence[bytes]) -> dict[str, Any]:
        """Append through the leader; its answer, or its error as an ApiError."""
        return await self._call_json(leader_id, "POST", "/raft/append", _chunks([encode_bodies(bodies)]),
                                     {"content-type": BATCH_CONTENT_TYPE}, timeout=self.wait_timeout_s,
                                     client=self._data.get(leader_id))

    async def read_index(self, leader_id: str) -> int:
        answer = await self._call_json(leader_id, "GET", "/raft/read_index", timeout=self.wait_timeout_s)
        index = answer.get("committed_index")
        if not isinstance(index, int):
            raise ApiError(Code.NETWORK_ERROR, f"{leader_id} answered a read index without an index")
        return index

    async def transfer_leadership(self, leader_id: str, target: str) -> dict[str, Any]:
        return await self._call_json(leader_id, "POST", "/raft/leader", json.dumps({"target": target}).encode(),
                                     timeout=self.wait_timeout_s)

    async def status(self, peer_id: str, timeout_s: float) -> dict[str, Any]:
        return await self._call_json(peer_id, "GET", "/raft/status", timeout=timeout_s)

    # -- plumbing ----------------------------------------------------------------------

    def _decode(self, cls: type[M], data: bytes) -> M:
        try:
            return decode_message(cls, data)
        except PeerMessageError as exc:
            raise PeerUnavailable(str(exc)) from None

    async def _post(self, peer_id: str, path: str, content: bytes | AsyncIterator[bytes], *,
                    client: httpx.AsyncClient | None = None) -> bytes:
        response = await self._send(peer_id, "POST", path, content, None, client=client)
        if response.status_code != 200:
            raise PeerUnavailable(f"{peer_id} {path}: HTTP {response.status_code}")
        return response.content

    async def _call_json(self, peer_id: str, method: str, path: str, content: Any = None,
                         headers: dict[str, str] | None = None, *, timeout: Any = httpx.USE_CLIENT_DEFAULT,
                         client: httpx.AsyncClient | None = None) -> dict[str, Any]:
        """An API call; transport failures become NETWORK_ERROR, the peer's errors pass through
        with their code and status, so a member answers as the leader did."""
        try:
            response = await self._send(peer_id, method, path, content, headers, timeout=timeout, client=client)
            answer = response.json()
        except (PeerUnavailable, ValueError) as exc:
            raise ApiError(Code.NETWORK_ERROR, f"no answer from {peer_id}: {exc}") from None
        if response.status_code == 200 and isinstance(answer, dict):
            return answer
        if response.status_code == PEER_ERROR_STATUS:
            error = _peer_error(answer)
            if error is not None:
                raise error
        raise ApiError(Code.NETWORK_ERROR, f"{peer_id} {path}: HTTP {response.status_code}")

    async def _send(self, peer_id: str, method: str, path: str, content: Any, headers: Any, *,
                    client: httpx.AsyncClient | None = None, timeout: Any = httpx.USE_CLIENT_DEFAULT,
                    ) -> httpx.Response:
        if peer_id not in self.addresses:
            raise PeerUnavailable(f"unknown peer {peer_id!r}")
        client = self._fresh(peer_id, client or self._control[peer_id])
        key = (peer_id, self._kind(peer_id, client))
        self._inflight[key] = self._inflight.get(key, 0) + 1
        try:
            response = await client.request(method, path, content=content, headers=headers, timeout=timeout)
        except (httpx.HTTPError, OSError) as exc:  # refused, reset, timed out, an HTTP/2 protocol error
            self._note_failure(peer_id, path, exc, client)
            raise PeerUnavailable(f"{peer_id} {path}: {type(exc).__name__}: {exc}") from None
        except Exception as exc:  # h2 state errors surface as other types: still only a failed call
            log.debug("peer call %s %s failed", peer_id, path, exc_info=True)
            self._note_failure(peer_id, path, exc, client)
            raise PeerUnavailable(f"{peer_id} {path}: {type(exc).__name__}: {exc}") from None
        finally:
            self._inflight[key] -= 1
        if response.status_code in (401, 403):  # it answers, but not to this member: no contact
            exc = PeerUnavailable(f"{peer_id} refuses this member's cluster secret (HTTP {response.status_code})")
            self._note_failure(peer_id, path, exc, client)
            raise exc
        now = time.monotonic()
        self.last_contact[peer_id] = now
        self._answered[key] = now
        return response

    def _kind(self, peer_id: str, client: httpx.AsyncClient) -> str:
        return "data" if client is self._data.get(peer_id) else "control"

    def _fresh(self, peer_id: str, client: httpx.AsyncClient) -> httpx.AsyncClient:
        """`client`, or a new one in its place when its connection is idle and silent (IDLE_RECONNECT_S)."""
        kind = self._kind(peer_id, client)
        key = (peer_id, kind)
        last = max(self._answered.get(key, self._started), self._opened.get(key, self._started))
        if self._inflight.get(key) or time.monotonic() - last < IDLE_RECONNECT_S:
            return client
        return self._replace(peer_id, kind, client)

    def _replace(self, peer_id: str, kind: str, client: httpx.AsyncClient) -> httpx.AsyncClient:
        """A new client for one of a peer's two connections; the old one is closed in the background."""
        pool = self._data if kind == "data" else self._control
        if pool.get(peer_id) is client:
            pool[peer_id] = self._client(self.addresses[peer_id], self._timeouts_ms[kind == "data"])
            self._opened[(peer_id, kind)] = time.monotonic()
            task = asyncio.get_running_loop().create_task(_close(client))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        return pool[peer_id]

    def _client(self, address: str, timeout_ms: int) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=f"{'https' if self._tls else 'http'}://{address}", http1=False, http2=True,
            verify=self._tls or False, headers=self._headers, timeout=timeout_ms / 1000,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1), trust_env=False)

    def _note_failure(self, peer_id: str, path: str, exc: Exception, client: httpx.AsyncClient) -> None:
        """A connection that has not carried an answer for RECONNECT_AFTER_S is replaced: after a partition
        heals, an HTTP/2 connection whose calls all timed out can stay wedged while the peer is back (and
        the peer's other connection may be fine meanwhile). A peer silent for longer gets a warning, once
        per UNREACHABLE_WARN_S."""
        now = time.monotonic()
        kind = self._kind(peer_id, client)
        key = (peer_id, kind)
        current = (self._data if kind == "data" else self._control).get(peer_id) is client
        if (current and now - self._answered.get(key, self._started) >= RECONNECT_AFTER_S
                and now - self._reconnected.get(key, -RECONNECT_AFTER_S) >= RECONNECT_AFTER_S):
            self._reconnected[key] = now
            self._replace(peer_id, kind, client)
        silent = now - self.last_contact.get(peer_id, self._started)
        if silent >= UNREACHABLE_WARN_S and now - self._warned.get(peer_id, -UNREACHABLE_WARN_S) >= UNREACHABLE_WARN_S:
            self._warned[peer_id] = now
            log.warning("%s has not answered for %.0f s; last error (%s): %s: %s", peer_id, silent, path,
                        type(exc).__name__, exc)


async def _close(client: httpx.AsyncClient) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(client.aclose(), 5.0)


def peer_error_body(error: ApiError) -> dict[str, Any]:
    """How a peer route answers an error: the public shape plus the HTTP status to pass on."""
    body = error.body()
    body["error"]["status"] = error.status
    return body


def _peer_error(answer: Any) -> ApiError | None:
    try:
        error = answer["error"]
        return ApiError(Code[error["code"]], str(error["message"]), error.get("leader"), int(error["status"]))
    except (KeyError, TypeError, ValueError):
        return None




async def _chunks(parts: list[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        view = memoryview(part)
        for offset in range(0, len(view), CHUNK_BYTES):
            yield bytes(view[offset:offset + CHUNK_BYTES])
