"""Issue 44's findings, tried on a running group as the audit tried them: each request here was
answered wrongly, or stopped a member, on the tree before it.

Deadlines are generous liveness bounds (a member that answers at all answers within them), never
timings.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import httpx
import pytest

from raftlog.api import log_pb2
from raftlog.app.launcher import SMALL_FILES, LocalCluster
from raftlog.raft.cluster_version import LEVEL
from tests.processes import ClusterFactory, eventually, serving

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


ALICE = "alice-token-0123456789"
MALLORY = "mallory-token-0123456789"
ADMIN = "admin-token-0123456789abc"


@pytest.fixture(scope="module")
def owned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Two writers of their own names; small session bounds, so a flood meets them."""
    yield from serving(tmp_path_factory.mktemp("owners"), 3, settings={
        **SMALL_FILES, "tokens": f"writer:alice:{ALICE},writer:mallory:{MALLORY},admin:ops:{ADMIN}",
        "producers_max": 40, "producer_sessions_per_name_max": 20})


def as_(token: str, **headers: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}", **headers}


def session(producer_id: int, sequence: int, epoch: int = 0) -> dict[str, str]:
    return {"x-raftlog-producer-id": str(producer_id), "x-raftlog-producer-epoch": str(epoch),
            "x-raftlog-sequence": str(sequence)}


def test_a_producer_session_takes_batches_from_its_owner_only(owned: LocalCluster) -> None:
    """Audit H2, as the issue tried it: the victim's retry is answered with its own entry, and the
    other writer is refused at its next sequence, at a fence, and at a new epoch."""
    url = owned.members[owned.wait_leader()].client_url
    with httpx.Client(timeout=LIVENESS_S) as http:
        opened = http.post(f"{url}/v1/producers", headers=as_(ALICE))
        assert opened.status_code == 201 and opened.json()["epoch"] == 0
        victim = opened.json()["id"]
        assert http.post(f"{url}/v1/entries", content=b"victim-0", headers=as_(ALICE, **session(victim, 0))
                         ).status_code == 201
        evil = http.post(f"{url}/v1/entries/batch", json={"entries": [{"body": "evil1"}, {"body": "evil2"}]},
                         headers=as_(MALLORY, **session(victim, 1)))
        fence = http.post(f"{url}/v1/entries", content=b"fence", headers=as_(MALLORY, **session(victim, 0, 65535)))
        taken = http.post(f"{url}/v1/producers", json={"id": victim}, headers=as_(MALLORY))
        for refused in (evil, fence, taken):
            assert (refused.status_code, refused.json()["error"]["code"]) == (403, "NOT_PRODUCER_OWNER")
        own = http.post(f"{url}/v1/entries", content=b"victim-1", headers=as_(ALICE, **session(victim, 1)))
        assert own.status_code == 201 and own.json()["duplicate"] is False
        retried = http.post(f"{url}/v1/entries", content=b"victim-1", headers=as_(ALICE, **session(victim, 1)))
        assert retried.json()["index"] == own.json()["index"] and retried.json()["duplicate"] is True
        got = http.get(f"{url}/v1/entries/{own.json()['index']}", headers=as_(ALICE)).json()
        assert got["body"] == "victim-1" and got["producer"] == {"id": victim, "epoch": 0, "sequence": 1}
        closed = http.delete(f"{url}/v1/producers/{victim}", headers=as_(MALLORY))
        assert closed.status_code == 403
        assert http.delete(f"{url}/v1/producers/{victim}", headers=as_(ALICE)).status_code == 200
        after = http.post(f"{url}/v1/entries", content=b"victim-2", headers=as_(ALICE, **session(victim, 2)))
        assert (after.status_code, after.json()["error"]["code"]) == (409, "UNKNOWN_PRODUCER")


def test_a_flood_of_sessions_is_refused_and_forgets_no_one(owned: LocalCluster) -> None:
    """Audit M4: fresh producers evicted the least recently active, whose retries were then new. Now a
    batch from a producer with no session is refused, a name's sessions are bounded, and a full table
    refuses new sessions instead of forgetting live ones."""
    url = owned.members[owned.wait_leader()].client_url
    with httpx.Client(timeout=LIVENESS_S) as http:
        victim = http.post(f"{url}/v1/producers", headers=as_(ALICE)).json()["id"]
        first = http.post(f"{url}/v1/entries", content=b"v0", headers=as_(ALICE, **session(victim, 0))).json()
        invented = http.post(f"{url}/v1/entries", content=b"x", headers=as_(MALLORY, **session(12345, 7)))
        assert (invented.status_code, invented.json()["error"]["code"]) == (409, "UNKNOWN_PRODUCER")
        codes = [http.post(f"{url}/v1/producers", headers=as_(MALLORY)) for _ in range(25)]
        refused = [r.json()["error"] for r in codes if r.status_code != 201]
        assert len(refused) == 5 and {e["code"] for e in refused} == {"PRODUCERS_FULL"}
        assert "producer_sessions_per_name_max" in refused[0]["message"]
        while (more := http.post(f"{url}/v1/producers", headers=as_(ALICE))).status_code == 201:
            pass  # alice fills what the table has left
        assert more.json()["error"]["code"] == "PRODUCERS_FULL" and "producers_max" in more.json()["error"]["message"]
        retried = http.post(f"{url}/v1/entries", content=b"v0", headers=as_(ALICE, **session(victim, 0))).json()
        assert (retried["index"], retried["duplicate"]) == (first["index"], True)


def test_without_tokens_a_producer_starts_at_its_session_and_sequence_zero(group: LocalCluster) -> None:
    """Every local client is trusted alike, but a batch at a sequence no session has reached, or
    under an epoch never opened, is still refused rather than appended as new."""
    url = group.members[group.wait_leader()].client_url
    with httpx.Client(timeout=LIVENESS_S) as http:
        for headers in (session(99, 3), session(99, 0)):
            refused = http.post(f"{url}/v1/entries", content=b"x", headers=headers)
            assert (refused.status_code, refused.json()["error"]["code"]) == (409, "UNKNOWN_PRODUCER")
        producer = http.post(f"{url}/v1/producers").json()
        fenced = http.post(f"{url}/v1/entries", content=b"x", headers=session(producer["id"], 0, 65535))
        assert fenced.json()["error"]["code"] == "UNKNOWN_PRODUCER"  # the audit's fence: an epoch never opened
        assert http.post(f"{url}/v1/entries", content=b"x", headers=session(producer["id"], 0)).status_code == 201


def test_a_member_of_the_previous_level_holds_the_cluster_version_back_until_it_is_upgraded(
        make_cluster: ClusterFactory) -> None:
    """A rolling upgrade: the member reporting level 0 (a release before levels reports none) keeps the
    group at cluster version 0, where what needs version 1 is refused naming it; upgraded (restarted
    at its release's level), the leader raises the version, and sessions open."""
    cluster = make_cluster(3, members={"n3": {"reported_level": 0}})
    url = cluster.members[cluster.wait_leader()].client_url
    with httpx.Client(timeout=LIVENESS_S) as http:
        status = http.get(f"{url}/v1/cluster").json()
        assert status["cluster_version"] == 0
        assert {m["id"]: m["level"] for m in status["members"]} == {"n1": LEVEL, "n2": LEVEL, "n3": 0}
        topic = {"name": "t", "queues": 1}
        for refused in (http.post(f"{url}/v1/producers"), http.post(f"{url}/v1/topics", json=topic)):
            assert (refused.status_code, refused.json()["error"]["code"]) == (409, "CLUSTER_VERSION_TOO_LOW")
            assert "n3 (level 0)" in refused.json()["error"]["message"]
        assert http.post(f"{url}/v1/entries", content=b"plain appends go on").status_code == 201
        cluster.stop_member("n3")
        cluster.members["n3"].settings = {}
        cluster.start_member("n3")
        url = cluster.members[cluster.wait_leader()].client_url
        assert http.get(f"{url}/v1/cluster").json()["cluster_version"] == LEVEL
        assert http.post(f"{url}/v1/producers").status_code == 201
        assert http.post(f"{url}/v1/topics", json=topic).status_code == 201
        cluster.stop_member("n3")  # and back: a member does not run a log above its level
        cluster.members["n3"].settings = {"reported_level": 0}
        cluster.start_member("n3")
        assert eventually(lambda: not cluster.members["n3"].running, "n3 to refuse to start")
        assert f"the log's cluster version is {LEVEL}" in cluster.tail("n3")


@pytest.mark.parametrize("field", [b"\x08\x00", b"\x12\x00"])
def test_a_grpc_batch_of_64_mib_of_other_fields_leaves_the_leader_answering_and_in_place(
        group: LocalCluster, field: bytes) -> None:
    """Audit A, L1: counting a batch's bodies walked every other field in Python, 10 to 16 s of the
    event loop for 64 MiB; past a batch's few other fields the count stops, and protobuf's C decides.
    (Receiving 64 MiB costs the leader's loop a moment too: on a loaded machine the group may elect
    another leader; that it answers throughout is what is asked.)"""
    before = leadership(group)
    member = group.members[before[0]]
    message = field * ((BODY_LIMIT - 1024) // len(field))  # no body at all: the count never reaches its stop

    def append() -> grpc.RpcError | bytes:
        with grpc.insecure_channel(member.grpc_address) as channel:
            try:
                answer: bytes = channel.unary_unary("/raftlog.v1.Log/AppendBatch")(message, timeout=120)
                return answer
            except grpc.RpcError as exc:
                return exc

    refused = answered_throughout(member.client_url, append)
    assert isinstance(refused, grpc.RpcError)
    assert refused.code() is grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]  # too many entries
    leadership(group)


def test_the_patterns_on_request_input_answer_at_the_size_limits(group: LocalCluster) -> None:
    """Audit A, the regular expressions that see request input, each at its way in's limit: a member's
    id and addresses (pydantic's patterns, the Rust engine, after the length bound) in a 64 MiB gRPC
    AddMember; a consumer's name in a 64 MiB gRPC CommitConsumer and GetConsumer, and in a path at
    the header bound. Each refused at once, the refusal short, the member answering throughout."""
    member = group.members[leadership(group)[0]]
    huge = "a" * (BODY_LIMIT - 4096) + "!"
    calls = [("AddMember", log_pb2.AddMemberRequest(id=huge, peer_address="127.0.0.1:1")),
             ("AddMember", log_pb2.AddMemberRequest(id="n9", peer_address=huge)),
             ("CommitConsumer", log_pb2.CommitConsumerRequest(name=huge, position=0)),
             ("GetConsumer", log_pb2.ConsumerRequest(name=huge))]

    def call_all() -> list[grpc.RpcError]:
        refused = []
        with grpc.insecure_channel(member.grpc_address, options=[("grpc.max_receive_message_length", 1 << 20)]
                                   ) as channel:
            for method, request in calls:
                with pytest.raises(grpc.RpcError) as exc:
                    channel.unary_unary(f"/raftlog.v1.Log/{method}")(request.SerializeToString(), timeout=60)
                refused.append(exc.value)
        return refused

    for refused in answered_throughout(member.client_url, call_all):
        assert refused.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND)  # type: ignore[attr-defined]
        assert len(refused.details()) < 1024  # type: ignore[attr-defined]
    long_name = "b" * (60 << 10)  # a path at the header bound (max_header_bytes 64 KiB)
    answer = httpx.get(f"{member.client_url}/v1/consumers/{long_name}", timeout=LIVENESS_S)
    assert answer.status_code in (400, 404) and len(answer.content) < 1024
