"""Clients that record every operation: invoke and complete times, and an outcome the checker can judge.

An append is `ok` (with its index), `fail` (certainly not appended: the request
never arrived, or the answer says it was refused before it was written), or
`unknown` (a timeout, a lost connection, or an answer that leaves it open).
Writers append through REST or through the gRPC API (`raftlog.v1.Log`), whose
errors name the same codes, each in a producer session (raft.producers): an
append that is not `ok` is sent again, the same bodies with the same sequence,
through any member, until the group answers it (a retry of one that went in is
answered with its original entries), so a run ends with no outcome unknown. An
op is one append however often it was sent: invoked at its first attempt.

A read is `ok` with what it saw, or `fail`. Reads come in three shapes, all
linearizable: one index (`get`), a JSON page of a range (`page`), and an
NDJSON stream of a range (`stream`); each records the entries it returned as
(index, type, body), and the first index it did not return (`seen_end`).
"""

from __future__ import annotations

import base64
import json
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import httpx
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from raftlog.api import log_pb2 as pb
from raftlog.api import log_pb2_grpc
from tests.faults.harness import FaultCluster

# answers that mean "not appended": refused before anything was written
DEFINITE = {"UNEXPECTED_ARGUMENT", "REQUEST_WITH_EMPTY_BODYS", "NOT_LEADER", "LEADER_PENDING_FULL",
            "LEADER_TRANSFERRING", "DISK_FULL"}
# a writer sends in order, in one epoch of a session it opened: a bug
REFUSED_SESSION = {"OUT_OF_ORDER_SEQUENCE", "PRODUCER_FENCED", "UNKNOWN_PRODUCER", "NOT_PRODUCER_OWNER"}
DRAIN_S = 8.0  # how long a writer stopped goes on sending its last append until it is answered
TIMEOUT_S = 3.0
# a gRPC deadline cancels the call on the server too (a REST handler runs on when its client is gone): past a
# forwarded append's own wait (max_wait_ack_ms + rpc_timeout_ms, twice), so the member's handling runs to its end
GRPC_TIMEOUT_S = 10.0
READ_SHAPES = ("get", "get", "get", "page", "stream")


@dataclass(frozen=True)
class Placed:
    """Where an answer said one message of a topic went: its queue, its offset there, its entry."""

    topic_id: int
    queue: int
    queue_offset: int
    index: int
    pos: int


@dataclass
class Op:
    kind: str  # "append" (of entries, or of a topic's messages), or a read: "get", "page", "stream"
    client: str
    member: str
    invoke: float
    bodies: list[bytes] = field(default_factory=list)
    index: int | None = None  # append: the first index; read: the (first) index asked for
    complete: float | None = None
    outcome: str = "unknown"  # ok, fail, unknown
    value: bytes | None = None  # get: the body returned (None: not found)
    code: str | None = None
    limit: int = 1  # page and stream: how many entries were asked for
    entries: list[tuple[int, str, bytes]] = field(default_factory=list)  # page and stream: what came back
    sequence: int | None = None  # append: its first entry's sequence in its writer's producer session
    attempts: int = 0  # append: how often it was sent
    message: str | None = None  # the error's words, where the answer had some
    key: str | None = None  # an append of a topic's messages: the key they all carry (their queue's)
    placed: list[Placed] = field(default_factory=list)  # and where the answer put each of them

    @property
    def is_read(self) -> bool:
        return self.kind != "append"

    @property
    def seen_end(self) -> int:
        """The first index a successful read did not return: its answer says the log ends before it."""
        assert self.index is not None
        if self.kind == "get":
            return self.index + (self.value is not None)
        return self.index + len(self.entries)


@dataclass(frozen=True)
class FaultWindow:
    kind: str
    start: float
    end: float


class History:
    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.faults: list[FaultWindow] = []
        self.lock = threading.Lock()
        self.acked: list[tuple[int, float]] = []  # (index, complete time) of ok appends, for readers
        self.membership_changes = 0  # asked for: each may have written one CONFIG_CHANGE entry

    def add(self, op: Op) -> None:
        with self.lock:
            self.ops.append(op)
            if op.kind == "append" and op.outcome == "ok":
                assert op.index is not None and op.complete is not None
                self.acked.append((op.index, op.complete))

    def fault_at(self, t: float) -> str:
        """The kind of fault going on at monotonic time t ("none" between faults)."""
        return next((w.kind for w in reversed(self.faults) if w.start <= t <= w.end), "none")


def open_session(http: httpx.Client, url: str, producer_id: int) -> int | None:
    """The epoch of a session of `producer_id` that a member opened, or None (no answer, or a refusal
    to try again: no leader yet, the cluster version not raised yet)."""
    try:
        response = http.post(f"{url}/v1/producers", json={"id": producer_id})
    except httpx.HTTPError:
        return None
    return response.json()["epoch"] if response.status_code == 201 else None


def open_grpc_session(stub: log_pb2_grpc.LogStub, producer_id: int) -> int | None:
    try:
        return stub.NewProducer(pb.NewProducerRequest(id=producer_id), timeout=GRPC_TIMEOUT_S).epoch
    except grpc.RpcError:
        return None


def send_append(http: httpx.Client, url: str, op: Op, producer_id: int, epoch: int) -> None:
    """POST the op's bodies (one entry, or a binary batch) in the session and set its outcome."""
    session = {"x-raftlog-producer-id": str(producer_id), "x-raftlog-producer-epoch": str(epoch),
               "x-raftlog-sequence": str(op.sequence)}
    try:
        if len(op.bodies) == 1:
            response = http.post(f"{url}/v1/entries", content=op.bodies[0],
                                 headers={"content-type": "application/octet-stream", **session})
        else:
            framed = b"".join(len(b).to_bytes(4, "big") + b for b in op.bodies)
            response = http.post(f"{url}/v1/entries/batch", content=framed,
                                 headers={"content-type": "application/vnd.raftlog.batch", **session})
    except httpx.ConnectError:
        op.outcome, op.code = "fail", "connect"  # it never arrived
        return
    except httpx.HTTPError as exc:
        op.code = type(exc).__name__
        return
    finally:
        op.complete = time.monotonic()
    try:
        answer = response.json()
    except ValueError:
        op.code = f"http {response.status_code}"
        return
    if response.status_code == 201:
        op.outcome = "ok"
        op.index = answer["index"] if len(op.bodies) == 1 else answer["first_index"]
        return
    op.code = answer.get("error", {}).get("code")
    op.message = answer.get("error", {}).get("message")
    if op.code in DEFINITE:
        op.outcome = "fail"


def send_grpc_append(stub: log_pb2_grpc.LogStub, op: Op, producer_id: int, epoch: int) -> None:
    """Append the op's bodies through the gRPC API (Append, or AppendBatch) in the session and set its
    outcome."""
    producer = pb.Producer(id=producer_id, epoch=epoch, sequence=op.sequence)
    try:
        if len(op.bodies) == 1:
            op.index = stub.Append(pb.AppendRequest(body=op.bodies[0], producer=producer),
                                   timeout=GRPC_TIMEOUT_S).index
        else:
            op.index = stub.AppendBatch(pb.AppendBatchRequest(bodies=op.bodies, producer=producer),
                                        timeout=GRPC_TIMEOUT_S).first_index
        op.outcome = "ok"
    except grpc.RpcError as exc:
        op.code, op.message = _grpc_code(exc), exc.details()  # type: ignore[attr-defined]
        if op.code in DEFINITE:
            op.outcome = "fail"
    finally:
        op.complete = time.monotonic()


def _grpc_code(exc: grpc.RpcError) -> str:
    """The DLedger code's name from the status's ErrorInfo; else gRPC's own code (no outcome known)."""
    status = rpc_status.from_call(exc)  # type: ignore[arg-type]
    for detail in status.details if status else ():
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info.reason
    return f"grpc {exc.code().name}"  # type: ignore[attr-defined]


def send_read(http: httpx.Client, url: str, op: Op) -> None:
    """Read what the op asks for, linearizably, and record what came back."""
    try:
        if op.kind == "get":
            response = http.get(f"{url}/v1/entries/{op.index}", headers={"accept": "application/octet-stream"})
            if response.status_code == 200:
                op.outcome, op.value = "ok", response.content
            elif response.status_code == 404:
                op.outcome, op.code = "ok", "INDEX_OUT_OF_RANGE"
            else:
                op.code = _code(response)
        else:
            accept = "application/json" if op.kind == "page" else "application/x-ndjson"
            response = http.get(f"{url}/v1/entries", params={"start": op.index, "limit": op.limit, "control": "true"},
                                headers={"accept": accept})  # the whole log: a consumer's commits too
            if response.status_code == 200:
                lines = (response.json()["entries"] if op.kind == "page"
                         else [json.loads(line) for line in response.text.splitlines() if line])
                op.entries = [(e["index"], e["type"], entry_body(e)) for e in lines]
                op.outcome = "ok"
            else:
                op.code = _code(response)
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        op.code = type(exc).__name__
    finally:
        op.complete = time.monotonic()
    if op.outcome != "ok":
        op.outcome = "fail"


def _code(response: httpx.Response) -> str:
    try:
        return response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return f"http {response.status_code}"


def entry_body(entry: dict[str, object]) -> bytes:
    text = str(entry["body"])
    return base64.b64decode(text) if entry["encoding"] == "base64" else text.encode()


class Client(threading.Thread):
    def __init__(self, name: str, urls: dict[str, str], history: History, seed: int) -> None:
        super().__init__(name=name, daemon=True)
        self.urls = urls
        self.history = history
        self.random = random.Random(seed)
        self.stopping = threading.Event()

    def stop(self) -> None:
        self.stopping.set()


class Writer(Client):
    """Appends unique bodies, singly and in small batches, through every member in turn, in a producer
    session of its own; each append is sent until the group answers it."""

    refusals = REFUSED_SESSION  # answers that end the append: a writer that keeps the rules never gets one

    def __init__(self, name: str, urls: dict[str, str], history: History, seed: int) -> None:
        super().__init__(name, urls, history, seed)
        self.producer_id = self.random.randrange(1, 2**63)
        self.violations: list[str] = []  # a session refused: raftlog broke the order it promises
        self.drain_until: float | None = None  # once stopped: when the last append is given up
        self.sequence = 0  # its session's next sequence

    def run(self) -> None:
        with httpx.Client(timeout=TIMEOUT_S) as http:
            epoch = self.opening(lambda member: open_session(http, self.urls[member], self.producer_id))
            if epoch is not None:
                self.appending(lambda op: send_append(http, self.urls[op.member], op, self.producer_id, epoch))

    def opening(self, open_one: Callable[[str], int | None]) -> int | None:
        """Its session's epoch, opened through members picked at random until one answers (None: stopped
        first). An open whose answer was lost and sent again opens the next epoch: the last one answered
        is the writer's."""
        while not self.stopping.is_set():
            epoch = open_one(self.random.choice(list(self.urls)))
            if epoch is not None:
                return epoch
            self.stopping.wait(0.05)
        return None

    def appending(self, send: Callable[[Op], None]) -> None:
        """Append after append until stopped; each sent, through members picked at random, until it is
        ok (a stopped writer goes on DRAIN_S with its last one)."""
        n = 0
        while not self.stopping.is_set():
            op = self.next_append(n)
            n += 1
            while True:
                op.attempts += 1
                op.member = self.random.choice(list(self.urls))
                op.outcome, op.code = "unknown", None
                send(op)
                if op.outcome == "ok" or op.code in self.refusals or self.drained():
                    break
                self.stopping.wait(0.05)  # do not spin against a member that is down
            if op.code in self.refusals:
                self.violations.append(f"{self.name}: {op.code} for sequence {op.sequence} ({len(op.bodies)} "
                                       f"entries from {op.bodies[0]!r}), attempt {op.attempts}, through "
                                       f"{op.member}: {op.message}")
            self.history.add(op)
            if op.outcome != "ok":
                return
            self.appended(op)

    def drained(self) -> bool:
        if not self.stopping.is_set():
            return False
        if self.drain_until is None:
            self.drain_until = time.monotonic() + DRAIN_S
        return time.monotonic() >= self.drain_until

    def next_append(self, n: int) -> Op:
        """Unique bodies, one or a small batch, its session's next sequence."""
        count = 1 if self.random.random() < 0.7 else self.random.randint(2, 5)
        bodies = [f"{self.name}-{n}-{k}".encode() for k in range(count)]
        return Op("append", self.name, "", time.monotonic(), bodies, sequence=self.sequence)

    def appended(self, op: Op) -> None:
        """The group answered `op`: the session's sequence goes on after it."""
        self.sequence += len(op.bodies)


class GrpcWriter(Writer):
    """A Writer through the gRPC API: `urls` are the members' gRPC addresses."""

    def run(self) -> None:
        channels = {m: grpc.insecure_channel(address) for m, address in self.urls.items()}
        stubs = {m: log_pb2_grpc.LogStub(channel) for m, channel in channels.items()}
        try:
            epoch = self.opening(lambda member: open_grpc_session(stubs[member], self.producer_id))
            if epoch is not None:
                self.appending(lambda op: send_grpc_append(stubs[op.member], op, self.producer_id, epoch))
        finally:
            for channel in channels.values():
                channel.close()


class Reader(Client):
    """Reads acknowledged indices back from every member in turn, sampled across the whole log:
    one index (and just past the newest), a JSON page, or an NDJSON stream."""

    def run(self) -> None:
        with httpx.Client(timeout=TIMEOUT_S) as http:
            while not self.stopping.is_set():
                with self.history.lock:
                    count = len(self.history.acked)
                    newest = self.random.random() < 0.5
                    acked = self.history.acked[-1 if newest else self.random.randrange(count)] if count else None
                if acked is None:
                    self.stopping.wait(0.05)
                    continue
                kind = self.random.choice(READ_SHAPES)
                index = acked[0] + (self.random.randint(0, 2) if kind == "get" else 0)
                member = self.random.choice(list(self.urls))
                op = Op(kind, self.name, member, time.monotonic(), index=index, limit=self.random.randint(1, 20))
                send_read(http, self.urls[member], op)
                self.history.add(op)
                if op.outcome != "ok":
                    self.stopping.wait(0.05)


@dataclass
class Life:
    """One incarnation of a named consumer: what it was handed, and the commits it sent."""

    started: float
    delivered: list[tuple[int, bytes]] = field(default_factory=list)  # (index, body), in order
    committed: list[int] = field(default_factory=list)  # positions the group acknowledged, in order
    unknown: list[int] = field(default_factory=list)  # positions sent whose outcome is unknown
    problems: list[str] = field(default_factory=list)  # a compare-and-set found a position no life sent


class Consumer(Client):
    """A named consumer: it reads the log's data entries in order, through any member, commits its
    position every COMMIT_EVERY_S (a compare-and-set on the position it knows) and is killed every
    few seconds without committing what it processed since; each new life resumes with `consumer=`
    after the committed position. A compare-and-set refused (an earlier commit landed late) ends a
    life, as a consumer that lost its place restarts. The checker holds each life to having started
    right after a position committed before it, and to having been handed every data entry from
    there on, in order."""

    NAME = "orders"
    COMMIT_EVERY_S = 0.3

    def __init__(self, name: str, urls: dict[str, str], history: History, seed: int) -> None:
        super().__init__(name, urls, history, seed)
        self.lives: list[Life] = []

    @property
    def commits_sent(self) -> int:
        return sum(len(life.committed) + len(life.unknown) for life in self.lives)

    def run(self) -> None:
        with httpx.Client(timeout=TIMEOUT_S) as http:
            while not self.stopping.is_set():
                life = Life(time.monotonic())
                self.lives.append(life)
                self.live(http, life, time.monotonic() + self.random.uniform(1.0, 4.0))

    def live(self, http: httpx.Client, life: Life, death: float) -> None:
        known = self.position(http)  # what the group holds as this life begins (-1: none)
        next_index: int | None = None  # None: on after the committed position (consumer=)
        last_commit = time.monotonic()
        while known is not None and not self.stopping.is_set() and time.monotonic() < death:
            params = {"consumer": self.NAME} if next_index is None else {"start": next_index}
            page = self.call(http, "GET", "/v1/entries", params={**params, "limit": 50, "wait_ms": 200})
            if page is None:
                continue
            life.delivered += [(e["index"], entry_body(e)) for e in page["entries"]]
            next_index = page["next"]
            if next_index - 1 > known and time.monotonic() - last_commit >= self.COMMIT_EVERY_S:
                known = self.commit(http, life, next_index - 1, known)
                last_commit = time.monotonic()

    def position(self, http: httpx.Client) -> int | None:
        while not self.stopping.is_set():
            url = self.urls[self.random.choice(list(self.urls))]
            try:
                response = http.get(f"{url}/v1/consumers/{self.NAME}")
            except httpx.HTTPError:
                continue
            if response.status_code in (200, 404):
                return response.json()["position"] if response.status_code == 200 else -1
            self.stopping.wait(0.05)
        return None

    def call(self, http: httpx.Client, method: str, path: str, **kwargs: Any) -> Any:
        url = self.urls[self.random.choice(list(self.urls))]
        try:
            response = http.request(method, f"{url}{path}", **kwargs)
            if response.status_code == 200:
                return response.json()
        except (httpx.HTTPError, ValueError):
            pass
        self.stopping.wait(0.05)
        return None

    def commit(self, http: httpx.Client, life: Life, position: int, known: int) -> int | None:
        """Commit `position` over `known`; the position this life knows after it (None: the life ends)."""
        url = self.urls[self.random.choice(list(self.urls))]
        try:
            response = http.put(f"{url}/v1/consumers/{self.NAME}", json={"position": position, "expected": known})
        except httpx.HTTPError:
            life.unknown.append(position)
            return known
        if response.status_code == 200:
            life.committed.append(position)
            return position
        if _code(response) != "CONSUMER_CONFLICT":
            life.unknown.append(position)
            return known
        found = self.position(http)  # an earlier commit, of this life or of one before, landed late
        if found is not None and not any(found in (*other.committed, *other.unknown) for other in self.lives):
            life.problems.append(f"{self.name}: the group holds position {found}, which no life committed")
        return None


class Observer(threading.Thread):
    """Polls every member's status: a commit index must never fall within one run of a process, a term
    has at most one leader, a member exits only when a fault stopped it, and a follower holds what its
    leader says it acknowledged.

    The last is told from the leader's match index for a follower: when it rose between two looks while
    one follower process lived through both, that process acknowledged the entries, and its log must
    hold them for as long as it stays in that term. (A restarted process may hold less than its
    predecessor acknowledged: tail_cut does that on purpose, and the leader learns it by comparing.)
    """

    def __init__(self, cluster: FaultCluster, interval_s: float = 0.2) -> None:
        super().__init__(name="observer", daemon=True)
        self.cluster = cluster
        self.interval_s = interval_s
        self.stopping = threading.Event()
        self.violations: list[str] = []
        self.leaders: dict[int, set[str]] = {}  # term -> every member seen leading it
        self._seen: dict[tuple[str, int], int] = {}  # (member, pid) -> highest commit index seen
        self._exits: set[int] = set()  # pids whose exit was reported
        self.born: dict[int, float] = {}  # pid -> when the observer first saw that process
        self._said: dict[tuple[int, int, str], tuple[int, float]] = {}  # (leader pid, term, follower) -> match, asked
        self._acked: dict[tuple[int, int], tuple[int, float]] = {}  # (follower pid, term) -> index it holds, since
        self._short: set[tuple[int, int]] = set()  # (follower pid, term) already reported holding less

    def run(self) -> None:
        with httpx.Client(timeout=0.5) as http:
            while not self.stopping.wait(self.interval_s):
                self.look(http)

    def look(self, http: httpx.Client) -> None:
        for member_id, member in list(self.cluster.members.items()):  # a spare may join meanwhile
            process = member.process
            if process is None:
                continue
            self.born.setdefault(process.pid, time.monotonic())
            if member_id in self.cluster.paused:
                continue
            if (code := process.poll()) is not None:
                if member_id not in self.cluster.stopping and process.pid not in self._exits:
                    self._exits.add(process.pid)
                    self.violations.append(f"{member_id} (pid {process.pid}) exited with code {code}, "
                                           "though no fault stopped it")
                continue
            asked = time.monotonic()
            try:
                status = http.get(f"{member.client_url}/v1/cluster").json()
                self.judge(member_id, process.pid, status, asked, time.monotonic())
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                continue

    def judge(self, member_id: str, pid: int, status: dict[str, Any], asked: float, answered: float) -> None:
        """Check one member's status, read between `asked` and `answered` (monotonic seconds)."""
        committed, term = status["committed_index"], status["term"]
        if status.get("role") == "leader":
            self.saw(term, member_id)
            self._leader_said(member_id, pid, term, status["members"], asked, answered)
        key = (member_id, pid)
        if committed < self._seen.get(key, -1):
            self.violations.append(f"{member_id} (pid {pid}): commit index fell from "
                                   f"{self._seen[key]} to {committed}")
        self._seen[key] = max(committed, self._seen.get(key, -1))
        acked, since = self._acked.get((pid, term), (-1, math.inf))
        if since < asked and status["end_index"] < acked and (pid, term) not in self._short:
            self._short.add((pid, term))
            self.violations.append(f"{member_id} (pid {pid}) acknowledged entries up to {acked} in term {term}, "
                                   f"and its log ends at {status['end_index']}")

    def _leader_said(self, leader: str, pid: int, term: int, members: list[dict[str, Any]], asked: float,
                     answered: float) -> None:
        """Note each follower process that acknowledged entries to this leader since the last look."""
        for peer in members:
            follower, match = peer["id"], peer.get("match_index")
            member = self.cluster.members.get(follower)
            if follower == leader or match is None or member is None or member.process is None:
                continue
            before, before_asked = self._said.get((pid, term, follower), (math.inf, -math.inf))
            self._said[(pid, term, follower)] = (match, asked)
            follower_pid = member.process.pid
            if before < match and self.born.get(follower_pid, math.inf) < before_asked:
                held, _ = self._acked.get((follower_pid, term), (-1, 0.0))
                if match > held:
                    self._acked[(follower_pid, term)] = (match, answered)

    def saw(self, term: int, leader: str) -> None:
        """Record that `leader` said it leads `term`; a second one for a term is a violation."""
        names = self.leaders.setdefault(term, set())
        if leader not in names:
            names.add(leader)
            if len(names) == 2:
                self.violations.append(f"two leaders in term {term}: {sorted(names)}")

    def stop(self) -> None:
        self.stopping.set()
