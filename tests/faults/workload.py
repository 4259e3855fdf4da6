"""Clients that record every operation: invoke and complete times, and an outcome the checker can judge.

An append is `ok` (with its index), `fail` (certainly not appended: the request
never arrived, or the answer says it was refused before it was written), or
`unknown` (a timeout, a lost connection, or an answer that leaves it open).
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

import httpx

from tests.faults.harness import FaultCluster

# answers that mean "not appended": refused before anything was written
DEFINITE = {"UNEXPECTED_ARGUMENT", "REQUEST_WITH_EMPTY_BODYS", "NOT_LEADER", "LEADER_PENDING_FULL",
            "LEADER_TRANSFERRING", "LEADER_NOT_READY", "DISK_FULL"}
TIMEOUT_S = 3.0


@dataclass
class Op:
    kind: str  # "append" or "read"
    client: str
    member: str
    invoke: float
    bodies: list[bytes] = field(default_factory=list)
    index: int | None = None  # append: the first index; read: the index asked for
    complete: float | None = None
    outcome: str = "unknown"  # ok, fail, unknown
    value: bytes | None = None  # read: the body returned (None: not found)
    code: str | None = None


class History:
    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.lock = threading.Lock()
        self.acked: list[tuple[int, float]] = []  # (index, complete time) of ok appends, for readers

    def add(self, op: Op) -> None:
        with self.lock:
            self.ops.append(op)
            if op.kind == "append" and op.outcome == "ok":
                assert op.index is not None and op.complete is not None
                self.acked.append((op.index, op.complete))


def send_append(http: httpx.Client, url: str, op: Op) -> None:
    """POST the op's bodies (one entry, or a binary batch) and set its outcome."""
    try:
        if len(op.bodies) == 1:
            response = http.post(f"{url}/v1/entries", content=op.bodies[0],
                                 headers={"content-type": "application/octet-stream"})
        else:
            framed = b"".join(len(b).to_bytes(4, "big") + b for b in op.bodies)
            response = http.post(f"{url}/v1/entries/batch", content=framed,
                                 headers={"content-type": "application/vnd.raftlog.batch"})
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
    if op.code in DEFINITE:
        op.outcome = "fail"


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
    """Appends unique bodies, singly and in small batches, through every member in turn."""

    def run(self) -> None:
        seq = 0
        with httpx.Client(timeout=TIMEOUT_S) as http:
            while not self.stopping.is_set():
                member = self.random.choice(list(self.urls))
                count = 1 if self.random.random() < 0.7 else self.random.randint(2, 5)
                op = Op("append", self.name, member, time.monotonic(),
                        [f"{self.name}-{seq}-{k}".encode() for k in range(count)])
                seq += 1
                send_append(http, self.urls[op.member], op)
                self.history.add(op)
                if op.outcome != "ok":
                    self.stopping.wait(0.05)  # do not spin against a member that is down

class Reader(Client):
    """Reads acknowledged indices back, linearizably, from every member in turn."""

    def run(self) -> None:
        with httpx.Client(timeout=TIMEOUT_S) as http:
            while not self.stopping.is_set():
                with self.history.lock:
                    acked = self.history.acked[-200:]
                if not acked:
                    self.stopping.wait(0.05)
                    continue
                index = self.random.choice(acked)[0] + self.random.randint(0, 2)  # and just past it
                member = self.random.choice(list(self.urls))
                op = Op("read", self.name, member, time.monotonic(), index=index)
                try:
                    response = http.get(f"{self.urls[member]}/v1/entries/{index}",
                                        headers={"accept": "application/octet-stream"})
                    if response.status_code == 200:
                        op.outcome, op.value = "ok", response.content
                    elif response.status_code == 404:
                        op.outcome, op.code = "ok", "INDEX_OUT_OF_RANGE"
                    else:
                        op.outcome, op.code = "fail", f"http {response.status_code}"
                except httpx.HTTPError as exc:
                    op.outcome, op.code = "fail", type(exc).__name__
                op.complete = time.monotonic()
                self.history.add(op)
                if op.outcome != "ok":
                    self.stopping.wait(0.05)


class CommitWatcher(threading.Thread):
    """Polls every member's commit index; it must never fall within one run of a process."""

    def __init__(self, cluster: FaultCluster, interval_s: float = 0.2) -> None:
        super().__init__(name="commit-watcher", daemon=True)
        self.cluster = cluster
        self.interval_s = interval_s
        self.stopping = threading.Event()
        self.violations: list[str] = []
        self._seen: dict[tuple[str, int], int] = {}  # (member, pid) -> highest commit index seen

    def run(self) -> None:
        cluster = self.cluster
        with httpx.Client(timeout=0.5) as http:
            while not self.stopping.wait(self.interval_s):
                for member_id, member in cluster.members.items():
                    process = member.process
                    if process is None or member_id in cluster.paused:
                        continue
                    try:
                        committed = http.get(f"{member.client_url}/v1/cluster").json()["committed_index"]
                    except (httpx.HTTPError, ValueError, KeyError):
                        continue
                    key = (member_id, process.pid)
                    if committed < self._seen.get(key, -1):
                        self.violations.append(f"{member_id} (pid {process.pid}): commit index fell from "
                                               f"{self._seen[key]} to {committed}")
                    self._seen[key] = max(committed, self._seen.get(key, -1))

    def stop(self) -> None:
        self.stopping.set()
