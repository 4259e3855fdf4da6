"""A slot is held only by someone who may hold it (issue 44 D; the audit's M2), on real members:
a stranger at 127.0.0.2 holds every connection it can take on one port, and keeps holding it,
opening another as soon as the member closes one. A follower whose peer port it holds catches up
after its leader restarts; a client of the gRPC port, and one of the client port, is served. Then
the member closes the stranger's connections, none of which ever made a credited request, within
unauthenticated_idle_ms, while a client's connection that did stays.

What the stranger sends on each connection is what held a place before: on the peer port the
HTTP/2 preface and a SETTINGS frame that asks for a replication stream, then a PING every
PING_EVERY_S and never a stream, so no secret is ever asked for; on the gRPC port the preface and
SETTINGS, and nothing more (it answers the member's PINGs); on the client port a GET /healthz.
The ports are bounded at PORT_MAX here, above connections_per_address_max's default (256), so the
attack takes less of a shared machine; the bounds on an address and on an unused connection are
the defaults. The deadlines are generous liveness bounds, not timings.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import grpc
import h2.config
import h2.connection
import h2.exceptions
import h2.settings
import httpx
import pytest

from raftlog.api.peer_wire import REPLICATE_SETTING
from raftlog.app.launcher import SMALL_FILES, LocalCluster
from tests.processes import ClusterFactory, eventually, serving

STRANGER = "127.0.0.2"  # the attacker's address; members and clients are at 127.0.0.1
PORT_MAX = 320  # each port's bound on connections in these tests
TRIES = PORT_MAX + 16  # the stranger's connections: more than the port holds
HELD_AT_LEAST = 240  # what the stranger must hold before the client tries: most of what it may
SECRET = "cluster-secret-0123456789abcdef"
READER = "reader-token-0123456789"
AS_READER = (("authorization", f"Bearer {READER}"),)
PING_EVERY_S = 5.0  # the stranger's PINGs on the peer port: under its 12 s of silence
REFUSED_PAUSE_S = 1.0  # a connection closed at once (refused) is tried again after this
REFUSED_WITHIN_S = 0.5  # ... closed this soon after it opened: refused
SERVED_WITHIN_S = 10.0  # the liveness bound of each test
UNUSED_CLOSED_WITHIN_S = 30.0  # unauthenticated_idle_ms (5 s), with room for a busy machine

Speaker = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Stranger:
    """`count` connections to 127.0.0.1:`port` from STRANGER, each opened again as soon as the member
    closes it (after REFUSED_PAUSE_S when it was refused): `speak` says what each one sends, and
    returns when the member closes it. Runs in a thread of its own; every socket is closed on exit."""

    def __init__(self, port: int, count: int, speak: Speaker) -> None:
        self.port = port
        self.count = count
        self.speak = speak
        self.held = self.most = self.refused = self.closed = 0
        self._loop = asyncio.new_event_loop()
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._main(),), daemon=True)

    def __enter__(self) -> Stranger:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        stopping = eventually(lambda: self._stopping, "the stranger to start", 10)
        self._loop.call_soon_threadsafe(stopping.set)
        self._thread.join(30)
        assert not self._thread.is_alive()
        self._loop.close()

    def holds_all_it_can(self) -> bool:
        """It holds most of what it may, and one of its connections was refused: the port, or its
        address's share of it, is full."""
        self.most = max(self.most, self.held)
        return self.held >= HELD_AT_LEAST and self.refused > 0

    def __str__(self) -> str:
        return (f"holds {self.held} (seen at most {self.most}) of the {self.count} it tries; {self.refused} "
                f"refused at once, {self.closed} closed by the member after they were held")

    async def _main(self) -> None:
        self._stopping = asyncio.Event()
        holding = [asyncio.create_task(self._hold()) for _ in range(self.count)]
        await self._stopping.wait()
        for task in holding:
            task.cancel()
        await asyncio.gather(*holding, return_exceptions=True)

    async def _hold(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._stopping is not None
        while not self._stopping.is_set():
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port, local_addr=(STRANGER, 0))
            except OSError:
                await asyncio.sleep(REFUSED_PAUSE_S)
                continue
            opened = loop.time()
            self.held += 1
            try:
                await self.speak(reader, writer)
            except (OSError, asyncio.IncompleteReadError, h2.exceptions.ProtocolError):
                pass
            finally:
                self.held -= 1
                writer.close()
            if loop.time() - opened < REFUSED_WITHIN_S:
                self.refused += 1
                await asyncio.sleep(REFUSED_PAUSE_S)
            else:
                self.closed += 1


def idle_http2(replicate: bool, ping_every_s: float | None) -> Speaker:
    """The HTTP/2 preface and SETTINGS (asking for a replication stream, on the peer port), then
    nothing but a PING every `ping_every_s` and the member's SETTINGS and PINGs acknowledged."""
    async def speak(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        if replicate:
            connection.local_settings = h2.settings.Settings(client=True, initial_values={REPLICATE_SETTING: 1})
        connection.initiate_connection()
        writer.write(connection.data_to_send())
        while True:
            try:
                async with asyncio.timeout(ping_every_s):
                    data = await reader.read(65_536)
            except TimeoutError:
                connection.ping(b"stranger")
                writer.write(connection.data_to_send())
                continue
            if not data:
                return
            connection.receive_data(data)
            writer.write(connection.data_to_send())

    return speak


def health_checks(every_s: float = 50.0) -> Speaker:
    """GET /healthz, and again every `every_s` (within the member's keep-alive before this)."""
    async def speak(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            writer.write(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
            length = next(int(line.split(":")[1]) for line in head.split("\r\n") if line.startswith("content-length"))
            await reader.readexactly(length)
            if not head.startswith("http/1.1 200"):
                return  # refused: 503
            try:
                async with asyncio.timeout(every_s):
                    if not await reader.read(1):
                        return
            except TimeoutError:
                continue

    return speak


def wait(condition: Callable[[], Any], what: str, timeout_s: float, stranger: Stranger) -> Any:
    """`eventually`, saying what the stranger held when it gave up."""
    try:
        return eventually(condition, what, timeout_s)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}; the stranger {stranger}") from None


def leader_seen_by(cluster: LocalCluster, member_id: str) -> str | None:
    try:
        answer = httpx.get(f"{cluster.members[member_id].client_url}/readyz", timeout=2).json()
    except (httpx.HTTPError, ValueError):
        return None
    return answer.get("leader") if answer.get("status") == "ready" else None


def caught_up(url: str, index: int) -> bool:
    try:
        status = httpx.get(f"{url}/v1/cluster", timeout=2).json()
    except (httpx.HTTPError, ValueError):
        return False
    return bool(status["end_index"] >= index and status["committed_index"] >= index)


def test_a_follower_whose_peer_port_a_stranger_holds_catches_up_after_its_leader_restarts(
        make_cluster: ClusterFactory) -> None:
    """n1 leads (the preferred leader, so it leads again after its restart); the stranger holds all
    it can of n2's peer port; n1 restarts and must reach n2 on new connections."""
    cluster = make_cluster(3, cluster_secret=SECRET, peer_connections_max=PORT_MAX, preferred_leaders="n1")
    eventually(lambda: all(leader_seen_by(cluster, m) == "n1" for m in cluster.members), "n1 to lead", 60)
    follower = cluster.members["n2"]
    with Stranger(follower.peer_port, TRIES, idle_http2(replicate=True, ping_every_s=PING_EVERY_S)) as stranger:
        wait(stranger.holds_all_it_can, "the stranger to hold n2's peer port", 60, stranger)
        print(f"before the restart, the stranger {stranger}")
        cluster.stop_member("n1")
        cluster.start_member("n1")
        wait(lambda: leader_seen_by(cluster, "n1") == leader_seen_by(cluster, "n3") == "n1", "n1 to lead again",
             60, stranger)
        answer = httpx.post(f"{cluster.members['n1'].client_url}/v1/entries", content=b"after the restart", timeout=10)
        assert answer.status_code == 201, answer.text
        index = answer.json()["index"]
        wait(lambda: caught_up(follower.client_url, index), f"n2 to catch up to {index}", SERVED_WITHIN_S, stranger)
        print(f"n2 caught up; the stranger {stranger}")
        wait(lambda: stranger.closed >= HELD_AT_LEAST, "n2 to close the stranger's connections",
             UNUSED_CLOSED_WITHIN_S, stranger)


@pytest.fixture(scope="module")
def member(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from serving(tmp_path_factory.mktemp("slots"), 1, settings={
        **SMALL_FILES, "tokens": f"reader:{READER}", "grpc_connections_max": PORT_MAX, "max_connections": PORT_MAX})


def test_a_grpc_client_is_served_while_a_stranger_holds_all_it_can(member: LocalCluster) -> None:
    idle = idle_http2(replicate=False, ping_every_s=None)
    channel = grpc.insecure_channel(member.members["n1"].grpc_address)
    with Stranger(member.members["n1"].grpc_port, TRIES, idle) as stranger, channel:
        wait(stranger.holds_all_it_can, "the stranger to hold the gRPC port", 60, stranger)
        cluster = channel.unary_unary("/raftlog.v1.Log/Cluster")
        try:
            assert cluster(b"", timeout=SERVED_WITHIN_S, wait_for_ready=True, metadata=AS_READER)  # a ClusterResponse
        except grpc.RpcError as exc:
            raise AssertionError(f"not served: {exc}; the stranger {stranger}") from None
        print(f"served; the stranger {stranger}")
        states: list[grpc.ChannelConnectivity] = []
        channel.subscribe(states.append)
        wait(lambda: stranger.closed >= HELD_AT_LEAST, "the member to close the stranger's connections",
             UNUSED_CLOSED_WITHIN_S, stranger)
        assert states == [grpc.ChannelConnectivity.READY], "the client's connection stayed"
        assert cluster(b"", timeout=SERVED_WITHIN_S, metadata=AS_READER)


def test_a_client_is_served_while_a_stranger_holds_all_it_can(member: LocalCluster) -> None:
    url = member.members["n1"].client_url
    client = httpx.Client(headers=dict(AS_READER), timeout=2,  # httpx itself keeps an idle connection 5 s
                          limits=httpx.Limits(max_connections=1, keepalive_expiry=UNUSED_CLOSED_WITHIN_S * 2))
    with Stranger(member.members["n1"].client_port, TRIES, health_checks()) as stranger, client:
        wait(stranger.holds_all_it_can, "the stranger to hold the client port", 60, stranger)
        answer = wait(lambda: _served(client, f"{url}/v1/cluster"), "a client to be served", SERVED_WITHIN_S, stranger)
        assert answer.json()["leader"] == "n1"
        print(f"served; the stranger {stranger}")
        wait(lambda: stranger.closed >= HELD_AT_LEAST, "the member to close the stranger's connections",
             UNUSED_CLOSED_WITHIN_S, stranger)
        again = client.get(f"{url}/v1/cluster")  # on the connection of the first answer, still open
        assert again.status_code == 200 and again.extensions["network_stream"] is answer.extensions["network_stream"]


def _served(client: httpx.Client, url: str) -> Any:
    try:
        answer = client.get(url)
    except httpx.TransportError:
        return None
    return answer if answer.status_code == 200 else None
