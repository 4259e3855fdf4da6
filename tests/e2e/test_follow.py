"""Consumers on a real 3-node cluster: reads by position, long-polls, streams that follow the log
(NDJSON and server-sent events) across a leader change and a member's stop, and the bounds that
keep stalled readers from growing a member's memory."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import httpx
import pytest

from raftlog.api import log_pb2 as pb
from raftlog.api import log_pb2_grpc
from raftlog.api.bodies import BATCH_CONTENT_TYPE, encode_bodies
from raftlog.app.launcher import SMALL_FILES, LocalCluster
from tests.processes import eventually, metric, serving

NDJSON = {"accept": "application/x-ndjson"}
EVENTS = {"accept": "text/event-stream"}
BATCH_TRIES = 20
FOLLOW_LIMITS = {"follow_chunk_bytes": 16 << 10, "follow_buffer_bytes_max": 64 << 10, "follow_stall_ms": 2000}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from serving(tmp_path_factory.mktemp("follow"), 3, settings={**SMALL_FILES, **FOLLOW_LIMITS})


def leader_url(cluster: LocalCluster) -> str:
    return cluster.members[cluster.wait_leader()].client_url


def follower_url(cluster: LocalCluster) -> str:
    leader = cluster.wait_leader()
    return next(m.client_url for i, m in cluster.members.items() if i != leader and m.running)


def append(url: str, body: str) -> dict[str, Any]:
    response = httpx.post(f"{url}/v1/entries", content=body.encode(), timeout=10)
    assert response.status_code == 201, response.text
    return response.json()


def append_anywhere(cluster: LocalCluster, body: str) -> dict[str, Any]:
    """Append through whichever running member answers: any member forwards to the leader."""
    for _ in range(50):
        for member in cluster.members.values():
            if not member.running:
                continue
            try:
                response = httpx.post(f"{member.client_url}/v1/entries", content=body.encode(), timeout=10)
            except httpx.TransportError:
                continue
            if response.status_code == 201:
                return response.json()
        cluster.wait_leader()
    raise AssertionError(f"no member appended {body!r}")


def followers_open(url: str) -> float:
    return metric(url, "raftlog_followers")


class Tail:
    """A follow stream read in a thread: the indices and bodies it delivers, and how it ended."""

    def __init__(self, url: str, start: int, headers: dict[str, str] = NDJSON) -> None:
        self.url, self.start = url, start
        self.entries: list[dict[str, Any]] = []
        self.ended: str | None = None  # "clean" or the error
        self.arrived = threading.Condition()
        self._client = httpx.Client(timeout=httpx.Timeout(10, read=None))
        self._socket: socket.socket | None = None  # the stream's, once it answered
        self._thread = threading.Thread(target=self._read, args=(headers,), daemon=True)
        self._thread.start()

    def _read(self, headers: dict[str, str]) -> None:
        params = {"start": self.start, "follow": "true"}
        try:
            with self._client.stream("GET", f"{self.url}/v1/entries", params=params, headers=headers) as response:
                assert response.status_code == 200
                self._socket = response.extensions["network_stream"].get_extra_info("socket")
                for line in response.iter_lines():
                    if line:
                        with self.arrived:
                            self.entries.append(json.loads(line))
                            self.arrived.notify_all()
            self.ended = "clean"
        except Exception as exc:
            self.ended = repr(exc)
        with self.arrived:
            self.arrived.notify_all()

    def wait_for(self, index: int, timeout_s: float = 30.0) -> None:
        with self.arrived:
            assert self.arrived.wait_for(lambda: (self.entries and self.entries[-1]["index"] >= index)
                                         or self.ended is not None, timeout_s), f"{self.url} stalled"
        assert self.entries and self.entries[-1]["index"] >= index, f"{self.url} ended: {self.ended}"

    def wait_ended(self, timeout_s: float = 30.0) -> None:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), f"the stream from {self.url} did not end"

    def close(self) -> None:
        """End the stream now: a follow stream of an idle log sends nothing that would wake its reader."""
        if self._socket is not None:
            with contextlib.suppress(OSError):  # already gone
                self._socket.shutdown(socket.SHUT_RDWR)
        self._thread.join(10)
        assert not self._thread.is_alive(), f"the stream from {self.url} did not end"
        self._client.close()


def test_an_entry_is_read_back_by_the_position_its_append_answered(cluster: LocalCluster) -> None:
    answers = [append(leader_url(cluster), f"by position {i}") for i in range(3)]
    follower = follower_url(cluster)
    for answer in answers:
        page = httpx.get(f"{follower}/v1/entries", params={"pos": answer["pos"], "limit": 1}).json()
        assert [(e["index"], e["pos"], e["body"]) for e in page["entries"]] == [
            (answer["index"], answer["pos"], f"by position {answers.index(answer)}")]
    rest = httpx.get(f"{follower}/v1/entries", params={"pos": answers[0]["pos"]}).json()["entries"]
    assert [e["index"] for e in rest[:3]] == [a["index"] for a in answers]

    inside = httpx.get(f"{follower}/v1/entries", params={"pos": answers[1]["pos"] + 1})
    assert inside.status_code == 400 and inside.json()["error"]["code"] == "UNEXPECTED_ARGUMENT"
    assert f"entry {answers[1]['index']} starts at {answers[1]['pos']}" in inside.json()["error"]["message"]
    beyond = httpx.get(f"{follower}/v1/entries", params={"pos": 1 << 50})
    assert beyond.status_code == 404 and beyond.json()["error"]["code"] == "INDEX_OUT_OF_RANGE"
    both = httpx.get(f"{follower}/v1/entries", params={"pos": answers[0]["pos"], "start": 1})
    assert both.status_code == 400


def test_a_long_poll_answers_as_soon_as_an_entry_commits(cluster: LocalCluster) -> None:
    follower = follower_url(cluster)
    committed = httpx.get(f"{follower}/v1/entries", params={"start": 0, "limit": 1}).json()["committed_index"]
    empty = httpx.get(f"{follower}/v1/entries", params={"start": committed + 1000, "wait_ms": 50}).json()
    assert empty["entries"] == [] and empty["next"] == committed + 1000  # nothing came within wait_ms

    answer: list[httpx.Response] = []
    waiting = threading.Thread(target=lambda: answer.append(httpx.get(
        f"{follower}/v1/entries", params={"start": committed + 1, "wait_ms": 60_000}, timeout=70)))
    waiting.start()
    eventually(lambda: followers_open(follower) == 1, "the long-poll to wait on the follower")
    appended = append_anywhere(cluster, "long-polled")
    waiting.join(30)
    assert not waiting.is_alive()
    entries = answer[0].json()["entries"]
    assert entries and entries[-1]["index"] >= appended["index"]
    assert any(e["body"] == "long-polled" for e in entries)
    assert followers_open(follower) == 0

    too_long = httpx.get(f"{follower}/v1/entries", params={"start": 0, "wait_ms": 10**9})
    assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "UNEXPECTED_ARGUMENT"
    not_a_stream = httpx.get(f"{follower}/v1/entries", params={"start": 0, "follow": "true"})
    assert not_a_stream.status_code == 400


def test_server_sent_events_carry_the_index_and_resume_after_last_event_id(cluster: LocalCluster) -> None:
    first = append(leader_url(cluster), "event one")
    append(leader_url(cluster), "event two")
    follower = follower_url(cluster)
    headers = {**EVENTS, "last-event-id": str(first["index"])}  # an EventSource reconnecting after `first`
    with httpx.stream("GET", f"{follower}/v1/entries", params={"start": 0, "follow": "true"},
                      headers=headers, timeout=httpx.Timeout(10, read=30)) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = response.iter_lines()
        ids, data = next(lines), next(lines)
        assert ids == f"id: {first['index'] + 1}"
        assert json.loads(data.removeprefix("data: "))["index"] == first["index"] + 1
        later = append(leader_url(cluster), "event three")  # arrives on the open stream as it commits
        events = {}
        for line in lines:
            if line.startswith("id: "):
                current = int(line.removeprefix("id: "))
            elif line.startswith("data: "):
                events[current] = json.loads(line.removeprefix("data: "))["body"]
                if current >= later["index"]:
                    break
        assert events[later["index"]] == "event three"
    bad = httpx.get(f"{follower}/v1/entries", params={"follow": "true"}, headers={**EVENTS, "last-event-id": "x"})
    assert bad.status_code == 400


def test_stalled_readers_are_bounded_and_cut_off_while_a_reader_keeps_up(cluster: LocalCluster) -> None:
    url = leader_url(cluster)
    start = append(url, "before the flood")["index"]
    stalled = []
    for _ in range(3):  # follow streams that never read: their buffers fill, then they hold their chunk
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((httpx.URL(url).host, httpx.URL(url).port))
        sock.sendall(f"GET /v1/entries?start={start}&follow=true HTTP/1.1\r\nhost: 127.0.0.1\r\n"
                     "accept: application/x-ndjson\r\n\r\n".encode())
        stalled.append(sock)
    member = next(m for m in cluster.members.values() if m.client_url == url)
    channel = grpc.insecure_channel(member.grpc_address)
    stalled_grpc = log_pb2_grpc.LogStub(channel).Read(pb.ReadRequest(start=start, follow=True))  # never read
    reader = Tail(url, start)
    try:
        eventually(lambda: followers_open(url) == 4, "four follow streams")
        body = encode_bodies([b"f" * 4000] * 100)
        high = 0
        for _ in range(60):  # 24 MB of log: far beyond what the stalled readers' sockets hold
            last = append_batch(lambda: url, body)["last_index"]
            high = max(high, metric(url, "raftlog_follow_buffer_bytes"))
        assert high <= FOLLOW_LIMITS["follow_buffer_bytes_max"]
        reader.wait_for(last, timeout_s=60)  # the reader that reads gets everything, in order
        indices = [e["index"] for e in reader.entries]
        assert indices == list(range(start, last + 1))
        eventually(lambda: followers_open(url) == 1, "the stalled readers to be cut off (follow_stall_ms)")
        for sock in stalled:  # what the member sent them ends: the connection was cut
            assert _ends(sock)
        eventually(lambda: "cut off a gRPC follow stream" in member.log_path.read_text(), "the gRPC reader's cut")
        with pytest.raises(grpc.RpcError) as cut:  # the gRPC reader gets what was sent, then the cut
            for _ in stalled_grpc:
                pass
        assert cut.value.code() is grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
        assert "follow_stall_ms" in cut.value.details()  # type: ignore[attr-defined]
    finally:
        stalled_grpc.cancel()
        channel.close()
        reader.close()
        for sock in stalled:
            sock.close()


def test_follow_streams_go_on_across_a_leader_change_and_end_cleanly_when_a_member_stops(
        cluster: LocalCluster) -> None:
    start = append(leader_url(cluster), "before the change")["index"]
    tails = {member_id: Tail(m.client_url, start) for member_id, m in cluster.members.items()}
    try:
        for i in range(20):
            last = append_anywhere(cluster, f"change {i}")["index"]
        old = cluster.wait_leader()
        target = next(m for m in cluster.members if m != old)
        moved = httpx.post(f"{cluster.members[old].client_url}/v1/cluster/leader", json={"target": target},
                           timeout=30)
        assert moved.status_code == 200, moved.text
        for i in range(20):
            last = append_anywhere(cluster, f"after {i}")["index"]
        for tail in tails.values():
            tail.wait_for(last)
            assert [e["index"] for e in tail.entries][: last - start + 1] == list(range(start, last + 1))

        stopping = next(m for m in cluster.members if m != cluster.wait_leader())
        cluster.stop_member(stopping)
        tails[stopping].wait_ended()
        assert tails[stopping].ended == "clean"  # a clean end: the client resumes elsewhere
        got = tails[stopping].entries[-1]["index"]
        resumed = Tail(follower_url(cluster), got + 1)
        try:
            last = append_anywhere(cluster, "after the stop")["index"]
            resumed.wait_for(last)
            seen = [e["index"] for e in tails[stopping].entries] + [e["index"] for e in resumed.entries]
            assert seen[: last - start + 1] == list(range(start, last + 1))  # nothing skipped or twice
        finally:
            resumed.close()
    finally:
        for tail in tails.values():
            tail.close()
        for member_id, member in cluster.members.items():
            if not member.running:
                cluster.start_member(member_id)
        cluster.wait_leader()


def test_a_reader_that_stops_reading_a_stream_that_does_not_follow_is_cut_off_too(cluster: LocalCluster) -> None:
    """A page of the log as NDJSON, as stored and as events, each more than the sockets hold: a reader
    that takes none of it would hold its chunk of the follow budget, and its connection, for ever."""
    start = append(leader_url(cluster), "before a long page")["index"]
    body = encode_bodies([b"p" * 4000] * 100)
    for _ in range(20):  # 8 MB of log
        append_batch(lambda: leader_url(cluster), body)
    url = leader_url(cluster)
    member = next(m for m in cluster.members.values() if m.client_url == url)
    cut_before = member.log_path.read_text().count("it took nothing of its answer")
    stalled = []
    for accept in ("application/x-ndjson", "application/vnd.raftlog.entries", "text/event-stream"):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((httpx.URL(url).host, httpx.URL(url).port))
        sock.sendall(f"GET /v1/entries?start={start} HTTP/1.1\r\nhost: 127.0.0.1\r\naccept: {accept}\r\n\r\n"
                     .encode())
        stalled.append(sock)
    try:
        eventually(lambda: member.log_path.read_text().count("it took nothing of its answer") >= cut_before + 3,
                   "the member to cut the three readers off (follow_stall_ms)")
        for sock in stalled:
            assert _ends(sock)
    finally:
        for sock in stalled:
            sock.close()


def append_batch(url_of: Callable[[], str], body: bytes) -> dict[str, Any]:
    """A binary batch appended through `url_of()`, asked again while the group has no leader (503) or
    the outcome is unknown (504): an election on a busy 2-core machine is no failure of these tests."""
    for _ in range(BATCH_TRIES):
        answer = httpx.post(f"{url_of()}/v1/entries/batch", content=body, headers={"content-type": BATCH_CONTENT_TYPE},
                            timeout=30)
        if answer.status_code == 201:
            return answer.json()  # type: ignore[no-any-return]
        assert answer.status_code in (503, 504), answer.text
    raise AssertionError(f"no batch appended in {BATCH_TRIES} tries")


def _ends(sock: socket.socket) -> bool:
    """Read what is left until the connection ends: True at its end, False if it stays open."""
    sock.settimeout(10)
    try:
        while sock.recv(1 << 16):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True
