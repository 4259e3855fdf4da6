"""The public gRPC API on a real 3-node cluster with tokens: every method through the generated stubs,
errors with their gRPC codes and DLedger reasons, each role's token, a follow stream across a leader
change, health checks, and a client that knows the service only through server reflection."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pool, message_factory
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from grpc_status import rpc_status

from raftlog.api import log_pb2 as pb
from raftlog.api import log_pb2_grpc
from raftlog.app.launcher import SMALL_FILES, LocalCluster
from tests.processes import eventually, serving

TOKENS = {"reader": "reader-token-0123456789", "writer": "writer-token-0123456789",
          "admin": "admin-token-01234567890"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    tokens = ",".join(f"{role}:{token}" for role, token in TOKENS.items())
    yield from serving(tmp_path_factory.mktemp("grpc"), 3, settings={
        **SMALL_FILES, "tokens": tokens, "max_entry_bytes": 1000, "max_request_bytes": 20_000, "max_batch_entries": 50})


@pytest.fixture(scope="module")
def channels(cluster: LocalCluster) -> Iterator[dict[str, grpc.Channel]]:
    opened = {member_id: grpc.insecure_channel(m.grpc_address) for member_id, m in cluster.members.items()}
    yield opened
    for channel in opened.values():
        channel.close()


def as_role(role: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {TOKENS[role]}")]


def stub(channels: dict[str, grpc.Channel], member_id: str) -> log_pb2_grpc.LogStub:
    return log_pb2_grpc.LogStub(channels[member_id])


def follower_of(cluster: LocalCluster) -> str:
    leader = cluster.wait_leader()
    return next(m for m in cluster.members if m != leader)


def refusal(call: grpc.RpcError) -> tuple[grpc.StatusCode, str, dict[str, str]]:
    """A failed call's code, and the DLedger code name and metadata of its ErrorInfo."""
    status = rpc_status.from_call(call)  # type: ignore[arg-type]
    assert status is not None, "the status carries details"
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    assert info.domain == "raftlog"
    return call.code(), info.reason, dict(info.metadata)  # type: ignore[attr-defined]


def test_appends_on_a_follower_are_read_back_by_index_and_position(cluster: LocalCluster,
                                                                  channels: dict[str, grpc.Channel]) -> None:
    log = stub(channels, follower_of(cluster))  # a follower forwards appends to the leader
    one = log.Append(pb.AppendRequest(body=b"hello grpc"), metadata=as_role("writer"))
    assert one.leader == cluster.wait_leader()
    batch = log.AppendBatch(pb.AppendBatchRequest(bodies=[b"a", b"\x00binary", b"c"]), metadata=as_role("writer"))
    assert batch.last_index == batch.first_index + 2 and len(batch.positions) == 3

    by_index = log.Get(pb.GetRequest(index=one.index), metadata=as_role("reader"))
    assert (by_index.body, by_index.pos, by_index.type) == (b"hello grpc", one.pos, pb.NORMAL)
    by_pos = log.Get(pb.GetRequest(pos=batch.positions[1]), metadata=as_role("reader"))
    assert (by_pos.index, by_pos.body) == (batch.first_index + 1, b"\x00binary")

    read = list(log.Read(pb.ReadRequest(start=batch.first_index, limit=3), metadata=as_role("reader")))
    assert [e.body for e in read] == [b"a", b"\x00binary", b"c"]
    from_pos = list(log.Read(pb.ReadRequest(pos=batch.positions[2], limit=1), metadata=as_role("reader")))
    assert [e.index for e in from_pos] == [batch.last_index]


def test_a_producer_pipelines_batches_on_one_stream_and_gets_answers_in_order(
        cluster: LocalCluster, channels: dict[str, grpc.Channel]) -> None:
    for member_id in (cluster.wait_leader(), follower_of(cluster)):
        batches = [pb.AppendBatchRequest(bodies=[f"{member_id}-{i}-{j}".encode() for j in range(50)])
                   for i in range(40)]
        answers = list(stub(channels, member_id).AppendStream(iter(batches), metadata=as_role("writer")))
        assert len(answers) == 40
        for before, after in itertools.pairwise(answers):
            assert after.first_index > before.last_index  # in the log in the order sent
        for i in (0, 39):
            entries = list(stub(channels, member_id).Read(pb.ReadRequest(start=answers[i].first_index, limit=50),
                                                          metadata=as_role("reader")))
            assert [e.body for e in entries] == list(batches[i].bodies)


def test_errors_carry_grpc_codes_and_dledger_reasons(cluster: LocalCluster,
                                                    channels: dict[str, grpc.Channel]) -> None:
    log = stub(channels, follower_of(cluster))
    writer, reader, admin = as_role("writer"), as_role("reader"), as_role("admin")
    appended = log.Append(pb.AppendRequest(body=b"xy"), metadata=writer)
    cases = [
        (lambda: log.Get(pb.GetRequest(index=1 << 40), metadata=reader),
         grpc.StatusCode.NOT_FOUND, "INDEX_OUT_OF_RANGE"),
        (lambda: log.Get(pb.GetRequest(pos=appended.pos + 1), metadata=reader),
         grpc.StatusCode.INVALID_ARGUMENT, "UNEXPECTED_ARGUMENT"),
        (lambda: log.AppendBatch(pb.AppendBatchRequest(), metadata=writer),
         grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_WITH_EMPTY_BODYS"),
        (lambda: log.Append(pb.AppendRequest(body=b"x" * 1001), metadata=writer),
         grpc.StatusCode.RESOURCE_EXHAUSTED, "UNEXPECTED_ARGUMENT"),
        (lambda: log.TransferLeader(pb.TransferLeaderRequest(target="n9"), metadata=admin),
         grpc.StatusCode.INVALID_ARGUMENT, "UNKNOWN_MEMBER"),
        (lambda: list(log.Read(pb.ReadRequest(start=0, limit=-1), metadata=reader)),
         grpc.StatusCode.INVALID_ARGUMENT, "UNEXPECTED_ARGUMENT"),
    ]
    for call, code, reason in cases:
        with pytest.raises(grpc.RpcError) as failed:
            call()
        assert refusal(failed.value)[:2] == (code, reason)
    batches = [pb.AppendBatchRequest(bodies=[b"ok"]), pb.AppendBatchRequest(bodies=[b"ok"]),
               pb.AppendBatchRequest(), pb.AppendBatchRequest(bodies=[b"after"])]
    answers = []
    with pytest.raises(grpc.RpcError) as stream_ended:  # a stream ends at its first bad batch, with its status
        for answer in log.AppendStream(iter(batches), metadata=writer):
            answers.append(answer)
    assert len(answers) == 2 and answers[1].first_index > answers[0].last_index
    assert refusal(stream_ended.value)[:2] == (grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_WITH_EMPTY_BODYS")
    with pytest.raises(grpc.RpcError) as too_large:  # over max_request_bytes and its framing: gRPC's own refusal
        log.AppendBatch(pb.AppendBatchRequest(bodies=[b"x" * 1000] * 40), metadata=writer)
    assert too_large.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]


def test_each_method_needs_a_token_of_its_role(cluster: LocalCluster, channels: dict[str, grpc.Channel]) -> None:
    log = stub(channels, cluster.wait_leader())
    calls = {
        "reader": lambda md: log.Cluster(pb.ClusterRequest(), metadata=md),
        "writer": lambda md: log.Append(pb.AppendRequest(body=b"by role"), metadata=md),
        "admin": lambda md: log.TransferLeader(pb.TransferLeaderRequest(target="n9"), metadata=md),
    }
    for needed, call in calls.items():
        for metadata, code in (([], grpc.StatusCode.UNAUTHENTICATED),
                               ([("authorization", "Bearer not-a-token-at-all")], grpc.StatusCode.UNAUTHENTICATED)):
            with pytest.raises(grpc.RpcError) as failed:
                call(metadata)
            assert refusal(failed.value)[:2] == (code, code.name)
        for role in TOKENS:
            if list(TOKENS).index(role) < list(TOKENS).index(needed):
                with pytest.raises(grpc.RpcError) as failed:
                    call(as_role(role))
                assert refusal(failed.value)[:2] == (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED")
            elif needed != "admin":  # a transfer to n9 fails past its token check: UNKNOWN_MEMBER
                call(as_role(role))
    with pytest.raises(grpc.RpcError) as failed:
        calls["admin"](as_role("admin"))
    assert refusal(failed.value)[1] == "UNKNOWN_MEMBER"


def test_cluster_names_every_members_grpc_address(cluster: LocalCluster,
                                                  channels: dict[str, grpc.Channel]) -> None:
    status = stub(channels, "n1").Cluster(pb.ClusterRequest(), metadata=as_role("reader"))
    assert status.leader == cluster.wait_leader()
    assert {m.id: m.grpc_address for m in status.members} == {
        member_id: m.grpc_address for member_id, m in cluster.members.items()}
    assert all(m.reachable and m.voter for m in status.members)


def test_health_and_a_client_that_knows_the_service_only_by_reflection(
        cluster: LocalCluster, channels: dict[str, grpc.Channel]) -> None:
    channel = channels[follower_of(cluster)]
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "raftlog.v1.Log"):
        assert health.Check(health_pb2.HealthCheckRequest(service=service)).status == \
            health_pb2.HealthCheckResponse.SERVING

    pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
    service = pool.FindServiceByName("raftlog.v1.Log")
    methods = {m.name: m for m in service.methods}
    assert set(methods) == {"Append", "AppendBatch", "AppendStream", "Get", "Read", "Cluster", "TransferLeader",
                            "Members", "AddMember", "PromoteMember", "RemoveMember", "NewProducer", "CloseProducer",
                            "CommitConsumer", "GetConsumer", "ListConsumers", "DeleteConsumer"}
    append, get = methods["Append"], methods["Get"]
    request_type = message_factory.GetMessageClass(append.input_type)
    answer_type = message_factory.GetMessageClass(append.output_type)
    call = channel.unary_unary("/raftlog.v1.Log/Append", request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=answer_type.FromString)
    answer = call(request_type(body=b"by reflection"), metadata=as_role("writer"))
    entry_type = message_factory.GetMessageClass(get.output_type)
    fetch = channel.unary_unary("/raftlog.v1.Log/Get", request_serializer=lambda m: m.SerializeToString(),
                                response_deserializer=entry_type.FromString)
    entry = fetch(message_factory.GetMessageClass(get.input_type)(index=answer.index), metadata=as_role("reader"))
    assert entry.body == b"by reflection" and entry.pos == answer.pos


def test_a_follow_stream_goes_on_across_a_leader_change(cluster: LocalCluster,
                                                        channels: dict[str, grpc.Channel]) -> None:
    follower = follower_of(cluster)
    start = stub(channels, follower).Append(pb.AppendRequest(body=b"tail start"), metadata=as_role("writer")).index
    stream = stub(channels, follower).Read(pb.ReadRequest(start=start, follow=True), metadata=as_role("reader"))
    received: list[pb.Entry] = []
    arrived = threading.Condition()

    def read() -> None:
        try:
            for entry in stream:
                with arrived:
                    received.append(entry)
                    arrived.notify_all()
        except grpc.RpcError:
            pass  # cancelled at the end of the test

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        last = 0
        for i in range(10):
            last = stub(channels, follower).Append(pb.AppendRequest(body=f"before {i}".encode()),
                                                   metadata=as_role("writer")).index
        old = cluster.wait_leader()
        target = next(m for m in cluster.members if m != old)
        stub(channels, old).TransferLeader(pb.TransferLeaderRequest(target=target), metadata=as_role("admin"))
        assert cluster.wait_leader() == target
        for i in range(10):
            last = stub(channels, follower).Append(pb.AppendRequest(body=f"after {i}".encode()),
                                                   metadata=as_role("writer")).index
        with arrived:
            assert arrived.wait_for(lambda: received and received[-1].index >= last, 30)
        assert [e.index for e in received] == list(range(start, received[-1].index + 1))  # no gap, no repeat
        assert {b"before 9", b"after 9"} <= {e.body for e in received}
    finally:
        stream.cancel()
        reader.join(10)


def test_a_member_with_client_tls_serves_grpc_over_tls(tmp_path: Path) -> None:
    from tests.pki import Pki

    pki = Pki(tmp_path / "pki", "raftlog-test")
    settings = {**SMALL_FILES, "client_tls_cert": pki.cert, "client_tls_key": pki.key}
    with LocalCluster(tmp_path / "cluster", 1, settings=settings, verify=pki.client_context()) as cluster:
        cluster.wait_leader()
        address = cluster.members["n1"].grpc_address
        with grpc.secure_channel(address, grpc.ssl_channel_credentials(Path(pki.ca_file).read_bytes())) as secure:
            answer = log_pb2_grpc.LogStub(secure).Append(pb.AppendRequest(body=b"over tls"), timeout=10)
            assert answer.index >= 1
        with grpc.insecure_channel(address) as plain, pytest.raises(grpc.RpcError) as refused:
            log_pb2_grpc.LogStub(plain).Append(pb.AppendRequest(body=b"in clear"), timeout=5)
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]


def test_calls_beyond_the_ports_bound_are_refused(tmp_path: Path) -> None:
    settings = {**SMALL_FILES, "max_inflight_requests": 2, "max_followers": 2}  # 4 calls at once on the port
    with LocalCluster(tmp_path, 1, settings=settings) as cluster:
        cluster.wait_leader()
        with grpc.insecure_channel(cluster.members["n1"].grpc_address) as channel:
            log = log_pb2_grpc.LogStub(channel)
            tails = [log.Read(pb.ReadRequest(start=0, follow=True)) for _ in range(4)]
            try:
                for tail in tails:
                    assert next(tail).index == 0  # open, and waiting for more
                with pytest.raises(grpc.RpcError) as refused:
                    log.Append(pb.AppendRequest(body=b"one too many"), timeout=10)
                assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
            finally:
                for tail in tails:
                    tail.cancel()

            def room_again() -> bool:
                try:
                    log.Append(pb.AppendRequest(body=b"room again"), timeout=10)
                except grpc.RpcError as exc:
                    if exc.code() is not grpc.StatusCode.RESOURCE_EXHAUSTED:  # type: ignore[attr-defined]
                        raise
                    return False
                return True

            eventually(room_again, "room on the port once the tails' calls are over")


def test_a_client_that_pings_too_often_is_told_to_go_away(cluster: LocalCluster) -> None:
    """Keepalive enforcement: pings more often than every 10 s on an idle connection are strikes, and after
    two the server ends the connection (GOAWAY too_many_pings); the channel falls back from READY."""
    options = [("grpc.keepalive_time_ms", 500), ("grpc.keepalive_permit_without_calls", 1),
               ("grpc.http2.max_pings_without_data", 0)]
    states: list[grpc.ChannelConnectivity] = []
    changed = threading.Condition()

    def note(state: grpc.ChannelConnectivity) -> None:
        with changed:
            states.append(state)
            changed.notify_all()

    with grpc.insecure_channel(cluster.members["n1"].grpc_address, options=options) as channel:
        log_pb2_grpc.LogStub(channel).Cluster(pb.ClusterRequest(), metadata=as_role("reader"), timeout=10)
        channel.subscribe(note)
        try:
            with changed:
                assert changed.wait_for(lambda: grpc.ChannelConnectivity.READY in states and states[-1] in (
                    grpc.ChannelConnectivity.IDLE, grpc.ChannelConnectivity.TRANSIENT_FAILURE), 30), states
        finally:
            channel.unsubscribe(note)
