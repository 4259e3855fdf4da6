"""Credentials before bytes, on a real member: a call without a token (gRPC port) or without the
cluster secret (peer port) is refused from its metadata, before its message is read or decoded,
so however large the message, the member's memory stays where it was; and on HTTPS, connections
count from their accept (DESIGN, Security posture).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_status import rpc_status

from raftlog.api import peer_pb2
from raftlog.app.launcher import SMALL_FILES, LocalCluster
from tests.e2e.peer_port import peer_call
from tests.pki import Pki
from tests.processes import eventually, serving

SECRET = "cluster-secret-0123456789abcdef"
WRITER = "writer-token-0123456789"
EMPTY_BODIES = 6_000_000  # an AppendBatch of empty bodies: 12 MB on the wire, millions of objects decoded
PEER_MESSAGE_BYTES = 48 << 20  # under the peer port's message limit
RSS_GROWTH_MAX = 8 << 20  # what a refused call may leave behind: a few MB of allocator noise


@pytest.fixture(scope="module")
def member(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from serving(tmp_path_factory.mktemp("hostile"), 1, settings={
        **SMALL_FILES, "tokens": f"writer:{WRITER}", "cluster_secret": SECRET})


def rss_bytes(cluster: LocalCluster) -> int:
    """The node process's resident memory, as the kernel counts it."""
    process = cluster.members["n1"].process
    assert process is not None
    status = Path(f"/proc/{process.pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def append_batch(cluster: LocalCluster, message: bytes, token: str | None) -> grpc.RpcError | bytes:
    metadata = () if token is None else (("authorization", f"Bearer {token}"),)
    with grpc.insecure_channel(cluster.members["n1"].grpc_address) as channel:
        try:
            answer: bytes = channel.unary_unary("/raftlog.v1.Log/AppendBatch")(message, timeout=30,
                                                                                metadata=metadata)
            return answer
        except grpc.RpcError as exc:
            return exc


def test_a_huge_append_batch_without_a_token_leaves_memory_where_it_was(member: LocalCluster) -> None:
    assert isinstance(append_batch(member, b"\x0a\x01x", WRITER), bytes)  # warm up: each kind of call once
    for _ in range(2):
        assert isinstance(append_batch(member, b"\x0a\x00" * 10, None), grpc.RpcError)
    before = rss_bytes(member)
    refused = append_batch(member, b"\x0a\x00" * EMPTY_BODIES, None)
    after = rss_bytes(member)
    print(f"gRPC AppendBatch of {EMPTY_BODIES} empty bodies, no token: RSS {before / 2**20:.1f} MiB before, "
          f"{after / 2**20:.1f} MiB after")
    assert isinstance(refused, grpc.RpcError)
    assert refused.code() is grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]
    assert rpc_status.from_call(refused) is not None  # type: ignore[arg-type]  # the ErrorInfo is there
    assert after - before < RSS_GROWTH_MAX


def test_a_huge_peer_call_without_the_secret_leaves_memory_where_it_was(member: LocalCluster) -> None:
    port = member.members["n1"].peer_port
    for _ in range(2):  # warm up
        with pytest.raises(grpc.RpcError):
            peer_call(port, "ChangeMembership", b"\x0a\x00" * 10)
    before = rss_bytes(member)
    with pytest.raises(grpc.RpcError) as refused:
        peer_call(port, "ChangeMembership",
                  peer_pb2.MembershipChange(id="n9", peer_address="x" * PEER_MESSAGE_BYTES).SerializeToString())
    after = rss_bytes(member)
    print(f"peer ChangeMembership of {PEER_MESSAGE_BYTES >> 20} MiB, no secret: RSS {before / 2**20:.1f} MiB before, "
          f"{after / 2**20:.1f} MiB after")
    assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]
    assert after - before < RSS_GROWTH_MAX



def test_client_connections_count_from_their_accept_before_the_tls_handshake(tmp_path: Path) -> None:
    """On HTTPS, two strangers that never begin their TLS handshake hold the two connections
    allowed: a third is closed at once; once they go, a client gets its answer."""
    pki = Pki(tmp_path, "client")
    settings = {**SMALL_FILES, "client_tls_cert": pki.cert, "client_tls_key": pki.key, "max_connections": 2}
    with LocalCluster(tmp_path / "c", 1, settings=settings, verify=pki.client_context()) as cluster:
        cluster.wait_leader()
        port = cluster.members["n1"].client_port
        strangers = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
        try:
            with socket.create_connection(("127.0.0.1", port)) as third:
                third.settimeout(30)  # a guard against a hang, not a measure: it is closed at once
                assert third.recv(1) == b""
        finally:
            for stranger in strangers:
                stranger.close()
        answer = eventually(lambda: _healthz(cluster.members["n1"].client_url, pki), "a client to get through")
        assert answer.status_code == 200


def _healthz(url: str, pki: Pki) -> httpx.Response | None:
    try:
        return httpx.get(f"{url}/healthz", verify=pki.client_context(), timeout=5)
    except httpx.TransportError:  # the strangers' places are not free yet
        return None
