"""Issue 44's findings, tried on a running group as the audit tried them: each request here was
answered wrongly, or stopped a member, on the tree before it.

Deadlines are generous liveness bounds (a member that answers at all answers within them), never
timings.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from raftlog.app.launcher import SMALL_FILES, LocalCluster
from tests.processes import ClusterFactory, serving

LIVENESS_S = 10.0  # a member that is not stopped answers /healthz well within this
BODY_LIMIT = 64 << 20  # max_request_bytes' default


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from serving(tmp_path_factory.mktemp("trust"), 3, settings=SMALL_FILES)


def leadership(cluster: LocalCluster) -> tuple[str, int]:
    """The leader and its term, as the members agree."""
    leader = cluster.wait_leader()
    status = httpx.get(f"{cluster.members[leader].client_url}/v1/cluster", timeout=LIVENESS_S).json()
    return leader, status["term"]


def answered_throughout(url: str, request: Callable[[], Any]) -> Any:
    """What `request` answers, while /healthz of `url` is asked again and again until it has: each
    answered within LIVENESS_S."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(request()))
    thread.start()
    probes = 0
    with httpx.Client(timeout=LIVENESS_S) as client:
        while thread.is_alive() or probes == 0:
            assert client.get(f"{url}/healthz").status_code == 200
            probes += 1
    thread.join()
    return result[0]


HOSTILE = b'"' + b'\\",' * (BODY_LIMIT // 3)  # audit H1: the pre-count's regex rescanned from every quote


def test_a_hostile_json_batch_leaves_the_member_answering_and_the_leader_in_place(group: LocalCluster) -> None:
    """The audit's 93 KB body: the leader answers throughout, and stays the leader."""
    before = leadership(group)
    url = group.members[before[0]].client_url
    answer = answered_throughout(url, lambda: httpx.post(
        f"{url}/v1/entries/batch", content=HOSTILE[:93_001], headers={"content-type": "application/json"}))
    assert answer.status_code == 400  # one unterminated string: not JSON
    assert leadership(group) == before


def test_a_hostile_json_batch_at_the_body_limit_leaves_the_member_answering(group: LocalCluster) -> None:
    """At 64 MiB, decoding any JSON body holds the event loop for about a second (linear, but longer
    than followers wait for a heartbeat): the member answers throughout, and the group has a leader."""
    url = group.members[leadership(group)[0]].client_url
    answer = answered_throughout(url, lambda: httpx.post(
        f"{url}/v1/entries/batch", content=HOSTILE[:BODY_LIMIT], headers={"content-type": "application/json"},
        timeout=120))
    assert answer.status_code == 400
    leadership(group)


def test_a_forwarded_proto_does_not_lift_the_host_check(group: LocalCluster) -> None:
    """Audit M1: uvicorn believed X-Forwarded-Proto from loopback, and the Host check ran only for http."""
    url = group.members["n1"].client_url
    for headers in ({}, {"x-forwarded-proto": "https"}, {"x-forwarded-proto": "https", "x-forwarded-for": "1.2.3.4"}):
        for path in ("/v1/entries", "/v1/cluster", "/v1/consumers"):
            answer = httpx.get(f"{url}{path}", headers={"host": "evil.example:8001", **headers})
            assert (answer.status_code, answer.json()["error"]["code"]) == (421, "HOST_NOT_ALLOWED"), (path, headers)


def test_proxy_headers_are_believed_from_trusted_proxies_only(make_cluster: ClusterFactory) -> None:
    """A page of https://<member> behind a TLS proxy writes through it; the same headers from
    anywhere else name nothing."""
    cluster = make_cluster(1, trusted_proxies="127.0.0.2")
    cluster.wait_leader()
    url = cluster.members["n1"].client_url
    host = url.removeprefix("http://")
    proxied = {"x-forwarded-proto": "https", "origin": f"https://{host}"}

    def append(source: str) -> httpx.Response:
        with httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=LIVENESS_S) as client:
            return client.post(f"{url}/v1/entries", content=b"x", headers=proxied)

    assert append("127.0.0.2").status_code == 201
    refused = append("127.0.0.1")
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "ORIGIN_NOT_ALLOWED")
