"""TLS on both ports with a CA made in the test: HTTPS on the client port, mutual TLS (HTTP/2 over
TLS with ALPN) between members; plain connections and certificates of another CA are refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from raftlog.api import peer_pb2
from raftlog.app.launcher import SMALL_FILES, LocalCluster
from tests.e2e.peer_port import peer_call
from tests.pki import Pki
from tests.processes import eventually, serving


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"), "raftlog-test")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[LocalCluster]:
    settings = {**SMALL_FILES, "client_tls_cert": pki.cert, "client_tls_key": pki.key,
                "peer_tls_cert": pki.cert, "peer_tls_key": pki.key, "peer_tls_ca": pki.ca_file}
    yield from serving(tmp_path_factory.mktemp("tls"), 3, settings=settings, verify=pki.client_context())


def test_a_cluster_replicates_over_mutual_tls_and_serves_https(cluster: LocalCluster, pki: Pki) -> None:
    leader = cluster.members[cluster.wait_leader()]
    assert leader.client_url.startswith("https://")
    with httpx.Client(verify=pki.client_context(), timeout=10) as client:
        index = client.post(f"{leader.client_url}/v1/entries", content=b"over tls").json()["index"]
        for member in cluster.members.values():
            eventually(lambda m=member: client.get(f"{m.client_url}/v1/entries/{index}?consistency=local")
                       .status_code == 200, f"entry {index} on {member.id}")
        urls = [m["client_url"] for m in client.get(f"{leader.client_url}/v1/cluster").json()["members"]]
        assert all(url.startswith("https://") for url in urls)  # what clients are told to use


def test_plain_http_and_unknown_cas_are_refused_on_the_client_port(cluster: LocalCluster, tmp_path: Path) -> None:
    member = next(iter(cluster.members.values()))
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{member.client_port}/healthz", timeout=5)
    stranger = Pki(tmp_path, "stranger")
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{member.client_url}/healthz", verify=stranger.client_context(), timeout=5)


def peer_status(cluster: LocalCluster, credentials: grpc.ChannelCredentials | None) -> bytes:
    return peer_call(next(iter(cluster.members.values())).peer_port, "Status", b"", credentials=credentials)


def test_the_peer_port_takes_only_members_with_a_certificate_of_the_ca(cluster: LocalCluster, pki: Pki,
                                                                       tmp_path: Path) -> None:
    ca, key, cert = (Path(p).read_bytes() for p in (pki.ca_file, pki.key, pki.cert))
    stranger = Pki(tmp_path, "stranger")
    refused = [None,  # cleartext HTTP/2
               grpc.ssl_channel_credentials(ca),  # TLS without a client certificate
               grpc.ssl_channel_credentials(ca, Path(stranger.key).read_bytes(),  # a certificate of another CA
                                            Path(stranger.cert).read_bytes())]
    for credentials in refused:
        with pytest.raises(grpc.RpcError) as refusal:
            peer_status(cluster, credentials)
        assert refusal.value.code() is grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
    answer = json.loads(peer_pb2.JsonAnswer.FromString(peer_status(cluster, grpc.ssl_channel_credentials(
        ca, key, cert))).json)
    assert answer["id"] == "n1"  # past TLS, a member's own status


def test_client_certificates_when_the_client_port_has_a_ca(tmp_path: Path, pki: Pki) -> None:
    settings = {**SMALL_FILES, "client_tls_cert": pki.cert, "client_tls_key": pki.key, "client_tls_ca": pki.ca_file}
    with LocalCluster(tmp_path, 1, settings=settings, verify=pki.client_context(with_cert=True)) as cluster:
        cluster.wait_leader()
        url = cluster.members["n1"].client_url
        assert httpx.post(f"{url}/v1/entries", content=b"x", verify=pki.client_context(with_cert=True)
                          ).status_code == 201
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{url}/healthz", verify=pki.client_context(), timeout=5)
