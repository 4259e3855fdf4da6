"""Writers that append to a topic by key in the simulation, and what the checker asks of topics and queues.

Each writer has a producer session and numbers its messages per queue (exactly once per queue); a
batch whose outcome is unknown is sent again, the same messages with the same sequence, until the
group answers. At the end, on the converged log: every answered message is at the queue offset its
answer named, each queue's offsets are contiguous in log order, and every member's table of queue
offsets is the one its log gives.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from raftlog.raft.errors import (
    NotProducerOwnerError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    RaftError,
    TopicError,
    UnknownProducerError,
)
from raftlog.raft.messages import Code, Role
from raftlog.raft.node import RaftNode
from raftlog.raft.producers import Sequenced
from raftlog.raft.topic_appends import MessageBatch
from raftlog.storage.codec import Magic
from raftlog.storage.consume_queue import UNIT
from raftlog.storage.message import Meta, decode_message, key_queue
from tests.sim.cluster import PRODUCER, SimCluster

TOPIC = "orders"
QUEUES = 4
KEYS = tuple(f"customer-{i}" for i in range(6))
REFUSALS = (OutOfOrderSequenceError, ProducerFencedError, UnknownProducerError, NotProducerOwnerError)


@dataclass(frozen=True, slots=True)
class MessageAck:
    """An answered message: where its answer said it is."""

    topic_id: int
    queue: int
    offset: int
    index: int
    body: bytes
    via: str


def _leader_at(cluster: SimCluster, node_id: str) -> RaftNode | None:
    node = cluster.members[node_id].node
    return node if node is not None and node.role is Role.LEADER else None


async def create_topic(cluster: SimCluster, node_id: str) -> bool:
    """One attempt to create the topic on a member that leads; True once it exists."""
    node = _leader_at(cluster, node_id)
    if node is None:
        return False
    try:
        await node.topic_appends.change_topic("create", TOPIC, {"queues": QUEUES})
    except TopicError as exc:
        return exc.code is Code.TOPIC_EXISTS  # a retry of a create that committed
    except RaftError:
        return False
    return True


async def append_messages(cluster: SimCluster, node_id: str, producer: Sequenced, key: str, bodies: list[bytes],
                          acks: list[MessageAck]) -> bool:
    """One attempt of a writer's batch on a member (answered only where it leads); False when the outcome
    is unknown or nothing was done: the writer sends it again."""
    node = _leader_at(cluster, node_id)
    if node is None:
        return False
    cluster.history.sent.update(bodies)
    batch = MessageBatch(TOPIC, bodies, [Meta.of([key], ["t"])] * len(bodies))
    try:
        answer = await node.topic_appends.append_messages(batch, PRODUCER, producer)
    except REFUSALS as exc:
        cluster.violations.append(f"writer {producer.producer_id} sequence {producer.sequence} of key {key} via "
                                  f"{node_id}: {type(exc).__name__}: {exc}")
        return False
    except RaftError:
        return False
    for k, body in enumerate(bodies):
        acks.append(MessageAck(answer.topic.id, answer.queue, answer.first_offset + k,
                               answer.entries.first_index + k, body, node_id))
    return True


def check_topics(cluster: SimCluster, acks: list[MessageAck]) -> None:
    """On the converged log (of every member in the configuration): each queue's offsets contiguous in log
    order, the queue offsets table the log's, and each answered message where its answer said."""
    leader = cluster.leader()
    assert leader is not None
    logs = {}
    for node in cluster.running:
        if node.config.self_id not in leader.configuration.ids:
            continue  # removed: its log stopped where it left
        store, found = node.store, {}
        offsets: dict[tuple[int, int], int] = {}
        for index in store.indices_of(frozenset((Magic.MESSAGE,)), store.begin_index):
            message = decode_message(store.get(index).body)
            key = (message.topic_id, message.queue)
            expected = offsets.get(key, message.queue_offset)
            if message.queue_offset != expected:
                cluster.violations.append(f"{node.config.self_id}: queue {key} has offset {message.queue_offset} at "
                                          f"entry {index}, after {expected - 1}")
            offsets[key] = message.queue_offset + 1
            found[index] = (message.topic_id, message.queue, message.queue_offset, bytes(message.body))
        check_consume_queues(cluster, node)
        if node.queue_offsets.next != offsets:
            cluster.violations.append(f"{node.config.self_id}: queue offsets {node.queue_offsets.next}, its log "
                                      f"gives {offsets}")
        logs[node.config.self_id] = found
    for ack in acks:
        for node_id, found in logs.items():
            if found.get(ack.index) != (ack.topic_id, ack.queue, ack.offset, ack.body):
                cluster.violations.append(f"{node_id}: the message answered at {ack.index}, offset {ack.offset} of "
                                          f"queue {ack.queue} (via {ack.via}), holds {found.get(ack.index)}")


Attempt = Callable[[str], Coroutine[Any, Any, bool]]
UntilAnswered = Callable[[SimCluster, random.Random, asyncio.Event, list[float], Attempt], Awaitable[bool]]


def check_consume_queues(cluster: SimCluster, node: RaftNode) -> None:
    """A member's consume queues hold the units its log's committed messages give, each at its offset."""
    if node.consume_queues is None:
        return
    store, derived = node.store, {}
    for index in store.indices_of(frozenset((Magic.MESSAGE,)), store.begin_index):
        if index > node.committed_index:
            break
        entry = store.get(index)
        message = decode_message(entry.body)
        derived.setdefault((message.topic_id, message.queue), []).append(
            (message.queue_offset, UNIT.pack(entry.pos, entry.size, message.tags_code)))
    for (topic_id, queue), units in derived.items():
        cq = node.consume_queues.queues.queue(topic_id, queue)
        first = units[0][0]
        if cq.next_offset != units[-1][0] + 1 or cq.units(first, len(units)) != b"".join(u for _o, u in units):
            cluster.violations.append(f"{node.config.self_id}: consume queue {queue} of topic {topic_id} holds "
                                      f"offsets {cq.min_offset}..{cq.next_offset - 1}, not its log's")


async def topic_writers(cluster: SimCluster, rng: random.Random, stop: asyncio.Event, acks: list[MessageAck],
                        until_answered: UntilAnswered, count: int = 2) -> None:
    """Writers append one key's messages at a time, each with its producer session, one batch in flight;
    `until_answered` is the scenarios' retry of a call through any member."""
    given_up = [0.0]
    if not await until_answered(cluster, rng, stop, given_up, lambda target: create_topic(cluster, target)):
        return

    async def writer(producer_id: int) -> None:
        epoch = [-1]
        if not await until_answered(cluster, rng, stop, given_up, lambda target:
                                    cluster.open_session(target, producer_id, epoch)):
            return
        sequences = [0] * QUEUES
        while not stop.is_set():
            key = rng.choice(KEYS)
            queue = key_queue(key, QUEUES)
            bodies = [f"seed{cluster.seed}-writer{producer_id}-q{queue}-{sequences[queue] + k}".encode()
                      for k in range(rng.randint(1, 3))]
            session = Sequenced(producer_id, epoch[0], sequences[queue])
            if not await until_answered(cluster, rng, stop, given_up, lambda target, s=session, b=bodies, k=key:
                                        append_messages(cluster, target, s, k, b, acks)):
                return
            sequences[queue] += len(bodies)
            await asyncio.sleep(rng.uniform(0.005, 0.03))

    await asyncio.gather(*(writer(2000 + k) for k in range(count)))
