"""Who may hold a connection on a member's ports, and for how long.

Each port bounds the connections it holds at once (max_connections, grpc_connections_max,
peer_connections_max), counted from their accept, TLS handshakes included. Within that bound:

- One address holds at most `connections_per_address_max` of a port's connections (an IPv6
  client counts by its /64, the least a host is given): one more is refused as one over the
  port's bound is. One host cannot take every place, whatever it sends.
- A connection is *credited* by a request that shows the port's credential and is not a probe:
  on the client port, a request not answered 401, 403 or 421 and not for /healthz, /readyz or
  /metrics; on the gRPC port, a call of raftlog.v1.Log that the token check let through; on the
  peer port, a call or a stream that passed the cluster secret (with no secret, any). A connection
  with no credit `unauthenticated_idle_ms` after its accept is closed, whatever else it sent
  (the HTTP/2 preface, SETTINGS, PINGs, probes): a slot is held only by someone who may hold it.
  A request under way is never cut for it (on the client port, request_read_timeout_ms bounds
  one that is slow to arrive).
- A credited connection is closed once idle for its port's time: `idle_connection_ms` after the
  client port's last credited request (a probe does not count, so a health check every minute
  does not keep a connection for ever), `grpc_idle_connection_ms` with no call on the gRPC port,
  and `grpc_connection_age_ms` after it opened (calls under way finish first), and
  `peer_idle_connection_ms` with no call or stream message on the peer port (PINGs never count).

PortSlots keeps the places of a port that accepts its connections itself (the gRPC and peer
ports); the client port's connection protocol (app.client_protocol) keeps its own clock, on
the same AddressSlots.
"""

from __future__ import annotations

import asyncio
import inspect
import ipaddress
import logging
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio

from raftlog.api.limits import ApiLimits
from raftlog.raft.waiting import loop_time

log = logging.getLogger("raftlog.api.connection_slots")

LOG_INTERVAL_S = 1.0  # a kind of closed or refused connection is logged at most this often
PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})  # REST requests that credit no connection
REFUSED_STATUSES = frozenset({401, 403, 421})  # REST answers to who sent a request: no credit either
ACCEPT_RETRY_S = 0.1  # after a failed accept (out of open files), the next try waits this long


async def accepted(listener: socket.socket, port: str) -> AsyncIterator[socket.socket]:
    """The connections `listener` accepts, for ever: each port accepts its own, to count them from
    their accept. A failed accept (out of open files, most likely) is said and tried again after
    ACCEPT_RETRY_S; the backlog waits meanwhile."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            sock, _ = await loop.sock_accept(listener)
        except OSError as exc:
            log.warning("%s port: cannot accept a connection: %s", port, exc)
            await asyncio.sleep(ACCEPT_RETRY_S)
            continue
        yield sock


def address_key(host: str) -> str:
    """Whose a connection is, for connections_per_address_max: its IPv4 address, or its IPv6
    address's /64 (an IPv4-mapped one as IPv4)."""
    if ":" not in host:
        return host
    try:
        address = ipaddress.IPv6Address(host.partition("%")[0])
    except ValueError:
        return host
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(ipaddress.IPv6Network((address, 64), strict=False))


class AddressSlots:
    """How many of a port's connections each address holds, at most `per_address_max`."""

    def __init__(self, per_address_max: int) -> None:
        self.per_address_max = per_address_max
        self._held: dict[str, int] = {}

    def held(self, address: str) -> int:
        return self._held.get(address, 0)

    def full(self, address: str, pending: int = 0) -> bool:
        """Whether `address` holds all it may, counting `pending` connections not taken yet."""
        return self._held.get(address, 0) + pending >= self.per_address_max

    def take(self, address: str) -> bool:
        """One more connection of `address`; False (none taken) when it holds all it may."""
        held = self._held.get(address, 0)
        if held >= self.per_address_max:
            return False
        self._held[address] = held + 1
        return True

    def give(self, address: str) -> None:
        held = self._held[address] - 1
        assert held >= 0
        if held:
            self._held[address] = held
        else:
            del self._held[address]


class Tally:
    """Connections closed or refused for one reason: a line at most every LOG_INTERVAL_S, with how
    many there were since the last one and who the latest was (a flood is one line a second)."""

    def __init__(self, level: int, text: str) -> None:
        self.level = level
        self.text = text  # %-format of (count, latest)
        self._count = 0
        self._logged = float("-inf")

    def note(self, latest: str) -> None:
        self._count += 1
        now = loop_time()
        if now - self._logged >= LOG_INTERVAL_S:
            self._logged = now
            log.log(self.level, self.text, self._count, latest)
            self._count = 0


@dataclass(frozen=True, slots=True)
class HoldRules:
    """How the client port holds its connections: per address, and until credited or idle."""

    addresses: AddressSlots
    unauthenticated_s: float  # unauthenticated_idle_ms
    idle_s: float  # idle_connection_ms

    @classmethod
    def client(cls, limits: ApiLimits) -> HoldRules:
        return cls(AddressSlots(limits.connections_per_address_max), limits.unauthenticated_idle_ms / 1000,
                   limits.idle_connection_ms / 1000)


class Slot:
    """One accepted connection's place on a port."""

    __slots__ = ("accepted", "address", "credited", "name", "peer", "timer", "transport")

    def __init__(self, address: str, peer: str, accepted: float) -> None:
        self.address = address  # its address_key
        self.peer = peer  # host:port, for the logs
        self.accepted = accepted  # loop time
        self.transport: Any = None  # once its handshake is done
        self.credited = False
        self.timer: asyncio.TimerHandle | None = None  # closes it unless credited
        self.name: str | None = None  # gRPC's name of it, when spliced to gRPC's server


class PortSlots:
    """The connections of a port that accepts them itself: at most `connections_max` at once, at
    most connections_per_address_max from one address, each closed unless credited within
    unauthenticated_idle_ms of its accept."""

    def __init__(self, port: str, bound: str, connections_max: int, limits: ApiLimits) -> None:
        self.port = port  # "peer", "gRPC": for the logs
        self.bound = bound  # the setting that bounds connections_max, for the logs
        self.connections_max = connections_max
        self.addresses = AddressSlots(limits.connections_per_address_max)
        self.unauthenticated_s = limits.unauthenticated_idle_ms / 1000
        self.slots: set[Slot] = set()  # from accept to end
        self._named: dict[str, Slot] = {}
        self._over_port = Tally(logging.WARNING, f"{port} port: refused %d connection(s), the latest from %s: "
                                                 f"{connections_max} open ({bound})")
        self._over_address = Tally(logging.WARNING, f"{port} port: refused %d connection(s), the latest from %s: "
                                                    f"{limits.connections_per_address_max} open from its address "
                                                    "(connections_per_address_max)")
        self._unused = Tally(logging.INFO, f"{port} port: closed %d connection(s), the latest from %s: no credited "
                                           f"call within unauthenticated_idle_ms ({limits.unauthenticated_idle_ms} "
                                           "ms) of its accept")

    @property
    def open(self) -> int:
        return len(self.slots)

    def admit(self, sock: socket.socket) -> Slot | None:
        """A place for a connection just accepted, or None (`sock` closed, logged at most once a
        second) when the port or its address holds all it may."""
        host, peer = _peer_of(sock)
        address = address_key(host)
        if len(self.slots) >= self.connections_max:
            self._over_port.note(peer)
        elif not self.addresses.take(address):
            self._over_address.note(peer)
        else:
            slot = Slot(address, peer, loop_time())
            self.slots.add(slot)
            return slot
        sock.close()
        return None

    def opened(self, slot: Slot, transport: Any) -> None:
        """The connection's transport is made (its TLS handshake done): its clock runs from its accept."""
        slot.transport = transport
        if not slot.credited and slot in self.slots:
            left = slot.accepted + self.unauthenticated_s - loop_time()
            slot.timer = asyncio.get_running_loop().call_later(max(left, 0.0), self._unused_too_long, slot)

    def named(self, slot: Slot, name: str) -> None:
        """gRPC's name of the connection (the Unix socket it is spliced from)."""
        slot.name = name
        self._named[name] = slot

    def peer_name(self, peer: str) -> str:
        """A caller's address, from gRPC's name of its connection."""
        slot = self._named.get(peer)
        return peer if slot is None else slot.peer

    def credit(self, slot: Slot) -> None:
        """A credited request: the connection stays until its port's idle rules close it."""
        if not slot.credited:
            slot.credited = True
            if slot.timer is not None:
                slot.timer.cancel()
                slot.timer = None

    def credit_name(self, name: str) -> None:
        slot = self._named.get(name)
        if slot is not None:
            self.credit(slot)

    def ended(self, slot: Slot) -> None:
        """The connection is gone (or never got a transport): its place is free."""
        if slot not in self.slots:
            return
        self.slots.discard(slot)
        self.addresses.give(slot.address)
        if slot.timer is not None:
            slot.timer.cancel()
            slot.timer = None
        if slot.name is not None:
            self._named.pop(slot.name, None)

    def transports(self) -> list[Any]:
        return [slot.transport for slot in self.slots if slot.transport is not None]

    def _unused_too_long(self, slot: Slot) -> None:
        slot.timer = None
        if slot.credited or slot.transport is None or slot.transport.is_closing():
            return
        self._unused.note(slot.peer)
        slot.transport.abort()


class CreditCalls(grpc.aio.ServerInterceptor):
    """A gRPC server's last interceptor: every call that reaches it passed the credential check
    before it, and credits its connection as it starts (`credit`, with gRPC's name of the caller).
    Only the methods of `services` credit (None: every method): reflection and health checks are
    probes."""

    def __init__(self, credit: Callable[[str], None], services: frozenset[str] | None = None) -> None:
        self.credit = credit
        self.services = services

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None:
            return None
        if self.services is not None and details.method[1:].rpartition("/")[0] not in self.services:
            return handler
        kind = ("stream" if handler.request_streaming else "unary") + "_" + (
            "stream" if handler.response_streaming else "unary")
        return handler._replace(**{kind: _crediting(getattr(handler, kind), self.credit)})


def _crediting(behaviour: Callable[..., Any], credit: Callable[[str], None]) -> Callable[..., Any]:
    """`behaviour`, of the same kind (grpc.aio tells a coroutine from an async generator by the
    function), crediting the caller's connection first. A function run in gRPC's threads is left
    as it is: it credits nothing."""
    if inspect.isasyncgenfunction(behaviour):
        async def streaming(request: Any, context: grpc.aio.ServicerContext) -> Any:
            credit(context.peer())
            async for answer in behaviour(request, context):
                yield answer

        return streaming
    if not inspect.iscoroutinefunction(behaviour):
        return behaviour

    async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        credit(context.peer())
        return await behaviour(request, context)

    return call


def _peer_of(sock: socket.socket) -> tuple[str, str]:
    """A connected socket's remote host, and host:port for the logs."""
    try:
        peer = sock.getpeername()
    except OSError:
        return "?", "?"
    if not isinstance(peer, tuple):
        return str(peer), str(peer)
    return str(peer[0]), f"{peer[0]}:{peer[1]}"
