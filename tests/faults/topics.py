"""Writers that append to a topic by key, beside the entries' writers and under the same faults.

Each writer creates the topic if no one has (a create answered TOPIC_EXISTS is one that went in
before), opens a producer session of its own, and appends one key's messages at a time, numbered in
their queue (exactly once per queue, as Kafka's producer numbers a partition's). A batch whose
outcome is unknown is sent again, the same messages with the same sequence, through any member,
until the group answers it: a retry of messages in the log is answered with where they are. Each
op records where its answer put every message (`Op.placed`), for the checker (tests.faults.queues).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import httpx

from raftlog.storage.message import key_queue
from tests.faults.workload import DEFINITE, REFUSED_SESSION, TIMEOUT_S, History, Op, Placed, Writer, open_session

TOPIC = "orders"
QUEUES = 4
KEYS = tuple(f"customer-{i}" for i in range(8))  # over every queue of a topic of QUEUES queues
TAGS = ((), ("created",), ("paid",), ("created", "paid"))  # each message's tags, for the consume queues' codes
# a topic writer's batch refused for what a writer that keeps the rules never sees once the topic exists
REFUSED_MESSAGES = REFUSED_SESSION | {"TOPIC_NOT_FOUND", "TOPIC_NOT_WRITABLE", "KEYS_IN_SEVERAL_QUEUES",
                                      "INVALID_TOPIC"}


def create_topic(http: httpx.Client, url: str) -> bool | None:
    """Ask a member to create the topic: True once it exists (created, or found created), False for a
    definite refusal that leaves nothing behind, None when the outcome is unknown."""
    try:
        response = http.post(f"{url}/v1/topics", json={"name": TOPIC, "queues": QUEUES})
    except httpx.ConnectError:
        return False
    except httpx.HTTPError:
        return None
    if response.status_code == 201:
        return True
    code = _code(response)
    if code == "TOPIC_EXISTS":
        return True
    return False if code in DEFINITE | {"CLUSTER_VERSION_TOO_LOW"} else None


def send_messages(http: httpx.Client, url: str, op: Op, producer_id: int, epoch: int) -> None:
    """POST the op's messages, all of its key, in the session; set its outcome and where each went."""
    assert op.key is not None
    session = {"x-raftlog-producer-id": str(producer_id), "x-raftlog-producer-epoch": str(epoch),
               "x-raftlog-sequence": str(op.sequence)}
    messages = [{"body": body.decode(), "keys": [op.key], "tags": list(TAGS[k % len(TAGS)])}
                for k, body in enumerate(op.bodies)]
    try:
        response = http.post(f"{url}/v1/topics/{TOPIC}/messages", json={"messages": messages}, headers=session)
    except httpx.ConnectError:
        op.outcome, op.code = "fail", "connect"  # it never arrived
        return
    except httpx.HTTPError as exc:
        op.code = type(exc).__name__
        return
    finally:
        op.complete = time.monotonic()
    if response.status_code == 201:
        try:
            said = response.json()["messages"]
            op.placed = [Placed(m["topic_id"], m["queue"], m["queue_offset"], m["index"], m["pos"]) for m in said]
        except (ValueError, KeyError, TypeError):
            op.code = "an answer of 201 without every message's place"
            return
        op.outcome, op.index = "ok", op.placed[0].index
        return
    op.code = _code(response)
    with contextlib.suppress(ValueError, KeyError, TypeError):
        op.message = response.json()["error"]["message"]
    if op.code in DEFINITE:
        op.outcome = "fail"


def _code(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return f"http {response.status_code}"


class TopicWriter(Writer):
    """Appends batches of one to three messages of one key (keys picked at random, over every queue)
    to the topic, through members picked at random, each numbered in its queue in the writer's session."""

    refusals = REFUSED_MESSAGES

    def __init__(self, name: str, urls: dict[str, str], history: History, seed: int) -> None:
        super().__init__(name, urls, history, seed)
        self.sequences = [0] * QUEUES  # each queue's next sequence in the session
        self.creates_sent = 0  # creates of the topic sent: each may have written a TOPIC entry
        self.topic_ready = False

    def run(self) -> None:
        with httpx.Client(timeout=TIMEOUT_S) as http:
            if not self.creating(lambda member: create_topic(http, self.urls[member])):
                return
            epoch = self.opening(lambda member: open_session(http, self.urls[member], self.producer_id))
            if epoch is not None:
                self.appending(lambda op: send_messages(http, self.urls[op.member], op, self.producer_id, epoch))

    def creating(self, create_one: Callable[[str], bool | None]) -> bool:
        """Create the topic through members picked at random until one says it exists (False: stopped
        first)."""
        while not self.stopping.is_set():
            self.creates_sent += 1
            if create_one(self.random.choice(list(self.urls))):
                self.topic_ready = True
                return True
            self.stopping.wait(0.05)
        return False

    def next_append(self, n: int) -> Op:
        key = self.random.choice(KEYS)
        queue = key_queue(key, QUEUES)
        count = self.random.randint(1, 3)
        sequence = self.sequences[queue]
        bodies = [f"{self.name}-q{queue}-{sequence + k}".encode() for k in range(count)]
        return Op("append", self.name, "", time.monotonic(), bodies, sequence=sequence, key=key)

    def appended(self, op: Op) -> None:
        assert op.key is not None
        self.sequences[key_queue(op.key, QUEUES)] += len(op.bodies)
