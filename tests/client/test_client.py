"""raftlog.client against real 3-member clusters: a producer's entries are in the log once each and in
order through a leader's death; its buffer is bounded; a fenced session fails its entries; a consumer
resumes after its committed position and goes on when the member it reads from dies."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import httpx
import pytest

from raftlog.app.launcher import SMALL_FILES, LocalCluster
from raftlog.client import AsyncConsumer, AsyncProducer, Connection, Consumer, Producer, RaftlogError
from tests.pki import Pki
from tests.processes import ClusterFactory


def data_bodies(url: str, start: int = 0) -> list[bytes]:
    """Every data entry's body in the committed log, in order (as any reader sees it)."""
    bodies: list[bytes] = []
    while True:
        page = httpx.get(f"{url}/v1/entries", params={"start": start, "limit": 1000}, timeout=10).json()
        bodies += [e["body"].encode() for e in page["entries"] if e["type"] == "normal"]
        if page["next"] > page["committed_index"]:
            return bodies
        start = page["next"]


def urls(cluster: LocalCluster) -> list[str]:
    return [m.client_url for m in cluster.members.values()]


def test_a_producer_appends_each_entry_once_and_in_order_through_a_leader_kill(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(3)
    leader = cluster.wait_leader()
    bodies = [f"entry {i}".encode() for i in range(20_000)]

    async def produce() -> tuple[list[int], int]:
        async with Connection(urls(cluster)) as connection, \
                AsyncProducer(connection, linger_ms=2, batch_entries=250) as producer:
            pending = []
            for i, body in enumerate(bodies):
                pending.append(await producer.send(body))
                if i == 5_000:  # batches in flight, the connection at the leader: kill it
                    await asyncio.to_thread(cluster.kill_member, leader)
            await producer.flush()
            return [(await p).index for p in pending], producer.retried

    indices, retried = asyncio.run(produce())
    assert indices == sorted(indices) and len(set(indices)) == len(bodies)  # in order, each its own entry
    survivor = next(url for m, url in zip(cluster.members, urls(cluster), strict=True) if m != leader)
    assert data_bodies(survivor) == bodies  # once each, none lost, none twice
    assert retried > 0  # the kill left batches without an answer: sent again, answered once


def test_the_buffer_is_bounded_and_a_fenced_session_fails_its_entries(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(3)
    cluster.wait_leader()

    async def run() -> None:
        async with Connection(urls(cluster)) as connection:
            producer = await AsyncProducer(connection, linger_ms=50, batch_entries=50, buffer_entries=100).start()
            most = 0
            for i in range(1_000):
                await producer.send(b"%d" % i)
                most = max(most, producer._buffered)
            assert most == 100  # full at times, never past it: send waited for room
            await producer.flush()
            newer = await AsyncProducer(connection, producer_id=producer.producer_id).start()  # the next epoch
            await (await newer.send(b"from the newer epoch"))
            fenced = await producer.send(b"from the fenced one")
            await producer.flush()
            with pytest.raises(RaftlogError) as refused:
                await fenced
            assert refused.value.code == "PRODUCER_FENCED"
            with pytest.raises(RaftlogError):
                await producer.send(b"after it")  # the session cannot go on
            await newer.close()

    asyncio.run(run())


def test_a_session_the_group_no_longer_has_is_opened_again_and_the_entries_go_on(
        make_cluster: ClusterFactory) -> None:
    """Closed underneath it (as an expired session is gone), the producer's next batch is refused
    UNKNOWN_PRODUCER: it opens a new session, numbers what is not answered again from 0, and every
    entry is in the log once; closing the producer closes its session."""
    cluster = make_cluster(3)
    url = cluster.members[cluster.wait_leader()].client_url

    async def run() -> tuple[bool, int]:
        async with Connection(urls(cluster)) as connection:
            producer = await AsyncProducer(connection, linger_ms=1, batch_entries=10).start()
            first_id = producer.producer_id
            for i in range(25):
                await producer.send(b"before %d" % i)
            await producer.flush()
            closed = await asyncio.to_thread(httpx.delete, f"{url}/v1/producers/{producer.producer_id}", timeout=10)
            assert closed.status_code == 200
            pending = [await producer.send(b"after %d" % i) for i in range(25)]
            await producer.flush()
            indices = [(await p).index for p in pending]
            assert indices == sorted(indices) and len(set(indices)) == 25
            await producer.close()
            gone = await asyncio.to_thread(httpx.delete, f"{url}/v1/producers/{producer.producer_id}", timeout=10)
            return producer.producer_id != first_id, gone.status_code

    renewed, gone = asyncio.run(run())
    assert renewed  # a new session: the group forgot the old one's epochs
    assert gone == 409  # close() closed it: there is none to close now
    assert data_bodies(url) == [b"before %d" % i for i in range(25)] + [b"after %d" % i for i in range(25)]


def test_a_consumer_resumes_after_its_position_and_goes_on_when_its_member_dies(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(3)
    cluster.wait_leader()
    written = [f"m{i}".encode() for i in range(3_000)]

    def write(bodies: list[bytes]) -> None:
        with Producer([m.client_url for m in cluster.members.values() if m.running], linger_ms=1) as producer:
            pending = producer.send_many(bodies)
            producer.flush()
            assert pending[-1].result().index > pending[0].result().index

    async def consume(count: int, kill: bool) -> tuple[list[bytes], int | None, int]:
        async with Connection(urls(cluster)) as connection:
            consumer = AsyncConsumer(connection, "audit", auto_commit_interval_s=None)
            await consumer.resume()
            got: list[bytes] = []
            async for record in consumer:
                if record.type != "normal":
                    continue  # a new leader's NOOP
                got.append(record.body)
                if kill and len(got) == 1_000:  # all it was handed so far: its member dies, then more comes
                    reading = str(consumer._response.url) if consumer._response is not None else ""
                    member = next(m for m, url in zip(cluster.members, urls(cluster), strict=True)
                                  if reading.startswith(url))
                    await asyncio.to_thread(cluster.kill_member, member)
                    await asyncio.to_thread(write, written[1_000:2_000])
                if len(got) == count:
                    break
            await consumer.commit()
            await consumer.close()
            return got, consumer.position, consumer.reconnects

    write(written[:1_000])
    first, position, reconnects = asyncio.run(consume(1_500, kill=True))
    assert first == written[:1_500] and reconnects >= 1  # none lost, none twice, through another member
    write(written[2_000:])
    rest, _, _ = asyncio.run(consume(1_501, kill=False))
    assert rest == written[1_499:]  # after the committed position: the last entry handed was not processed yet
    survivor = next(u for m, u in zip(cluster.members, urls(cluster), strict=True) if cluster.members[m].running)
    assert httpx.get(f"{survivor}/v1/consumers/audit", timeout=10).json()["position"] >= position


def test_the_synchronous_consumer_reads_what_the_producer_wrote(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(3)
    cluster.wait_leader()
    with Producer(urls(cluster)) as producer:
        producer.send_many([b"x", b"y", b"z"])
        producer.flush()
    seen: list[bytes] = []
    done = threading.Event()
    with Consumer(urls(cluster), "sync", auto_commit_interval_s=None) as consumer:
        for record in consumer:
            seen += [record.body] if record.type == "normal" else []
            if len(seen) == 3:
                done.set()
                break
        consumer.commit()
    assert done.is_set() and seen == [b"x", b"y", b"z"]


def test_the_client_speaks_https_with_tokens(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki", "client")
    settings = {**SMALL_FILES, "client_tls_cert": pki.cert, "client_tls_key": pki.key,
                "tokens": "reader:reader-token-for-the-client,writer:writer-token-for-the-client,"
                          "consumer:tls:consumer-token-for-the-client"}
    with LocalCluster(tmp_path / "cluster", 3, verify=pki.client_context(), settings=settings) as cluster:
        cluster.wait_leader()
        members = urls(cluster)
        assert all(url.startswith("https://") for url in members)

        async def run() -> None:
            async with Connection(members, ca=str(pki.ca_file)) as anonymous:
                with pytest.raises(RaftlogError) as refused:
                    await AsyncProducer(anonymous).start()
                assert refused.value.code == "UNAUTHENTICATED"
            async with Connection(members, token="writer-token-for-the-client", ca=str(pki.ca_file)) as writer, \
                    AsyncProducer(writer) as producer:
                appended = await (await producer.send(b"over TLS"))
            async with Connection(members, token="reader-token-for-the-client", ca=str(pki.ca_file)) as reader, \
                    AsyncConsumer(reader, "tls", auto_commit_interval_s=None) as consumer:
                async for record in consumer:
                    if record.index == appended.index:
                        break
                with pytest.raises(RaftlogError) as refused:
                    await consumer.commit()  # a reader reads, and moves no consumer (audit M3)
                assert refused.value.code == "PERMISSION_DENIED"
            async with Connection(members, token="consumer-token-for-the-client", ca=str(pki.ca_file)) as own, \
                    AsyncConsumer(own, "tls", auto_commit_interval_s=None) as consumer:
                async for record in consumer:
                    if record.index == appended.index:
                        assert record.body == b"over TLS"
                        break
                await consumer.commit()  # a consumer token of its name commits it

        asyncio.run(run())
