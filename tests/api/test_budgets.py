"""The member's budgets against what a client sends (docs/operations.md, Security; the 2026-11-28 audit's
M5, M6, L1 and L2), on a member in this process: routes that take JSON refuse another type before
they read a body, and small requests are bounded; every message of a gRPC AppendStream draws on the
request budget until its append is answered; JSON pages of the log draw on the follow budget while
they are sent; and the incident log: no traceback for a client that left, or for a position no
entry holds, and at most one a second per kind of the rest.

Requests go to the client port's ASGI stack as a server hands them over, chunk by chunk, so a test
can hold a body half-sent and see what the member does before the rest arrives.
"""

from __future__ import annotations

import asyncio
import json
import logging
from types import SimpleNamespace
from typing import Any

import grpc
import grpc.aio
import httpx
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from raftlog.api import errors
from raftlog.api import log_pb2 as pb
from raftlog.api.auth import LOCAL
from raftlog.api.consumers import ConsumerCommits
from raftlog.api.errors import ApiError, api_error
from raftlog.api.limits import ApiLimits
from raftlog.api.log_throttle import LogThrottle
from raftlog.api.peer_codec import consumer_commit_request
from raftlog.app.node import Node
from raftlog.raft.messages import Code, Role
from tests.api.conftest import WRITER

LIVENESS_S = 10  # a generous bound on an answer that needs nothing more from the client
AS_WRITER = (("authorization", f"Bearer {WRITER}"),)
APPEND_STREAM = "/raftlog.v1.Log/AppendStream"


class Upload:
    """A request's body as a server hands it to the app: `chunks`, then `then`: "end" (the body is
    whole), "hang" (nothing more until `leave()`) or "leave" (the client leaves at once); how many
    chunks the app took."""

    def __init__(self, chunks: list[bytes], then: str = "hang") -> None:
        self.chunks = chunks
        self.then = then
        self.taken = 0
        self.gone = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        if self.taken < len(self.chunks):
            self.taken += 1
            return {"type": "http.request", "body": self.chunks[self.taken - 1],
                    "more_body": self.then != "end" or self.taken < len(self.chunks)}
        if self.then == "hang":
            await self.gone.wait()
        return {"type": "http.disconnect"}

    def leave(self) -> None:
        self.gone.set()


class Answer:
    """What the app sends back; `sending` (when given) holds the body's message until set."""

    def __init__(self, sending: asyncio.Event | None = None) -> None:
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.body = b""
        self.started = asyncio.Event()
        self.body_due = asyncio.Event()  # the app is sending the body
        self.sending = sending

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = dict(message.get("headers", []))
            self.started.set()
        elif message["type"] == "http.response.body":
            self.body_due.set()
            if self.sending is not None:
                await self.sending.wait()
            self.body += message.get("body", b"")

    def json(self) -> Any:
        return json.loads(self.body)


def scope_of(method: str, path: str, headers: dict[str, str], query: bytes = b"") -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
            "path": path, "raw_path": path.encode(), "query_string": query, "root_path": "",
            "headers": [(b"host", b"127.0.0.1"), *((k.lower().encode(), v.encode()) for k, v in headers.items())],
            "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8001), "extensions": {}}


async def served(node: Node, method: str, path: str, headers: dict[str, str], upload: Upload,
                 answer: Answer | None = None, query: bytes = b"") -> tuple[Answer, asyncio.Task[None]]:
    """The request under way, once its answer has started (within the liveness bound)."""
    answer = answer or Answer()
    call = asyncio.create_task(node.public_asgi(scope_of(method, path, headers, query), upload.receive, answer.send))
    async with asyncio.timeout(LIVENESS_S):
        await answer.started.wait()
    return answer, call


def incidents(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "raftlog.api" and "incident" in r.getMessage()]


# -- a body is read only once its route would take it (audit M5) ----------------------------------------

JSON_ROUTES = [("PUT", "/v1/consumers/billing"), ("POST", "/v1/producers"), ("POST", "/v1/entries/batch"),
               ("POST", "/v1/cluster/leader"), ("POST", "/v1/cluster/members")]


@pytest.mark.parametrize(("method", "path"), JSON_ROUTES)
async def test_a_route_refuses_a_wrong_content_type_before_it_reads_the_body(node: Node, method: str,
                                                                             path: str) -> None:
    """A reader's text/plain upload of 1,000,000 bytes, 1,000 of them sent: refused 415 with nothing
    of it read, so nothing of it held in the writers' budget."""
    upload = Upload([b"x" * 1000])
    answer, call = await served(node, method, path, {"content-type": "text/plain", "content-length": "1000000"},
                                upload)
    assert answer.status == 415
    assert upload.taken == 0 and node.request_bytes.held == 0
    upload.leave()
    await call


async def test_a_small_request_over_its_bound_is_refused_before_or_as_it_arrives(node: Node) -> None:
    """small_request_bytes_max (64 KiB by default): a commit declaring 100,000 bytes is refused
    before a byte is read; one sent in 16 KiB chunks, without a length, after five of its hundred;
    the largest commit there is (1 KiB of metadata, every byte escaped) is taken."""
    declared = Upload([b" " * 1000])
    answer, call = await served(node, "PUT", "/v1/consumers/billing",
                                {"content-type": "application/json", "content-length": "100000"}, declared)
    assert answer.status == 413 and b"small_request_bytes_max" in answer.body and declared.taken == 0
    declared.leave()
    await call

    limit = node.service.limits.small_request_bytes_max
    streamed = Upload([b" " * (16 << 10)] * 100, "end")
    answer, call = await served(node, "POST", "/v1/producers", {"content-type": "application/json",
                                                               "transfer-encoding": "chunked"}, streamed)
    await call
    assert answer.status == 413 and streamed.taken <= limit // (16 << 10) + 1

    largest = json.dumps({"position": 0, "metadata": "\x01" * 1024}).encode()
    assert len(largest) > 6 * 1024
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=node.public_asgi),
                                 base_url="http://127.0.0.1") as client:
        committed = await client.put("/v1/consumers/billing", content=largest,
                                     headers={"content-type": "application/json"})
    assert committed.status_code == 200, committed.text
    assert node.request_bytes.held == 0


# -- AppendStream draws on the request budget (audit M6) -------------------------------------------------


class HeldAppends:
    """The member's appends, each held until the test lets them go."""

    def __init__(self, node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()
        append = node.service.append

        async def held(*args: Any, **kwargs: Any) -> Any:
            self.arrived.set()
            await self.release.wait()
            return await append(*args, **kwargs)

        monkeypatch.setattr(node.service, "append", held)


def reason(error: grpc.aio.AioRpcError) -> tuple[grpc.StatusCode, str]:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None, "the status carries details"
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    return error.code(), info.reason


async def test_an_append_streams_batches_are_held_in_the_budget_until_answered(
        node: Node, grpc_port: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of 100 bodies of 1,000 bytes on an AppendStream, its append held: its message's bytes
    are in the member's one request budget until the answer, none after."""
    budget, appends = node.request_bytes, HeldAppends(node, monkeypatch)
    batch = pb.AppendBatchRequest(bodies=[b"x" * 1000] * 100).SerializeToString()
    async with grpc.aio.insecure_channel(grpc_port) as channel:
        call = channel.stream_stream(APPEND_STREAM)(metadata=AS_WRITER)
        await call.write(batch)
        async with asyncio.timeout(LIVENESS_S):
            await appends.arrived.wait()
        assert budget.held == len(batch)
        appends.release.set()
        answer = pb.AppendBatchResponse.FromString(await call.read())
        assert answer.last_index - answer.first_index == 99
        assert budget.held == 0
        await call.done_writing()
        assert await call.code() is grpc.StatusCode.OK


async def test_an_append_stream_is_refused_when_the_budget_is_full(node: Node, grpc_port: str) -> None:
    """With other ports' requests holding all but 50 bytes of the budget, a batch of 100 bytes on an
    AppendStream ends the stream UNAVAILABLE SERVER_BUSY (nothing appended), as Append's would."""
    budget = node.request_bytes
    end = node.store.end_index
    assert budget.take(budget.max_bytes - 50)
    try:
        async with grpc.aio.insecure_channel(grpc_port) as channel:
            call = channel.stream_stream(APPEND_STREAM)(metadata=AS_WRITER)
            await call.write(pb.AppendBatchRequest(bodies=[b"y" * 100]).SerializeToString())
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call.read()
        assert reason(refused.value) == (grpc.StatusCode.UNAVAILABLE, "SERVER_BUSY")
    finally:
        budget.give(budget.max_bytes - 50)
    assert node.store.end_index == end and budget.held == 0


# -- JSON pages draw on the follow budget (audit L2) -----------------------------------------------------


async def test_a_json_page_is_held_in_the_follow_budget_while_it_is_sent(node: Node, client: httpx.AsyncClient
                                                                         ) -> None:
    """A page of 20 entries of 1,000 bytes: its rendered bytes are held while its body is on its way,
    given back after; with the budget full, the page is refused 503 SERVER_BUSY with Retry-After."""
    appended = [await client.post("/v1/entries", content=b"%04d" % i + b"e" * 996) for i in range(20)]
    assert {a.status_code for a in appended} == {201}
    first = appended[0].json()["index"]
    budget = node.service.follow_budget
    sending = asyncio.Event()
    answer, call = await served(node, "GET", "/v1/entries", {}, Upload([], "end"), Answer(sending),
                                query=b"start=%d&limit=20" % first)
    async with asyncio.timeout(LIVENESS_S):
        await answer.body_due.wait()
    assert answer.status == 200
    assert budget.held > 20 * 1000
    sending.set()
    await call
    assert len(answer.json()["entries"]) == 20 and budget.held == 0

    await budget.take(budget.max_bytes)  # the streams' chunks hold it all
    try:
        busy = await client.get("/v1/entries", params={"start": first, "limit": 20})
    finally:
        budget.give(budget.max_bytes)
    assert busy.status_code == 503 and busy.json()["error"]["code"] == "SERVER_BUSY"
    assert busy.headers["retry-after"] == "1"
    assert (await client.get("/v1/entries", params={"start": 1, "limit": 20})).status_code == 200


# -- the incident log (audit L1) -------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path", "kind"), [("POST", "/v1/entries", "application/octet-stream"),
                                                      ("PUT", "/v1/consumers/billing", "application/json")])
async def test_a_client_that_leaves_mid_body_is_no_incident(node: Node, caplog: pytest.LogCaptureFixture,
                                                            method: str, path: str, kind: str) -> None:
    """A slow upload cut off (as the server cuts a slowloris): no traceback, no INTERNAL_ERROR."""
    upload = Upload([b'{"posi'], "leave")
    answer, call = await served(node, method, path, {"content-type": kind, "content-length": "100"}, upload)
    await call
    assert answer.status == 400
    assert incidents(caplog) == []
    assert node.request_bytes.held == 0


async def test_an_unexpected_error_is_answered_and_logged_by_the_member_alone(
        node: Node, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A route that fails: 500 INTERNAL_ERROR, one incident line, and the exception does not reach
    the server, which would log its traceback again for every request (the ASGI transport raises it)."""
    async def failing() -> Any:
        raise RuntimeError("a file named /secret/path")

    monkeypatch.setattr(node.service, "cluster_status", failing)
    answer = await client.get("/v1/cluster")
    assert answer.status_code == 500 and answer.json()["error"]["code"] == "INTERNAL_ERROR"
    assert "/secret/path" not in answer.text
    assert len(incidents(caplog)) == 1


async def test_a_position_no_entry_holds_is_a_bad_request_not_an_incident(
        client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture) -> None:
    """Positions are signed 64-bit in the log and on the peer port: 2^63 is refused 400 (it raised
    struct.error in the entry's encoding, an incident with its traceback per request)."""
    for body in ({"position": 2**63}, {"position": 1, "expected": 2**63}):
        answer = await client.put("/v1/consumers/billing", json=body)
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "UNEXPECTED_ARGUMENT", answer.text
    removed = await client.delete("/v1/consumers/billing", params={"expected": 2**63})
    assert removed.status_code == 400
    assert incidents(caplog) == []


async def test_a_follower_refuses_an_expected_position_it_could_not_forward() -> None:
    """On a follower, a compare-and-set goes to the leader as a signed 64-bit `expected`: 2^63 is
    refused before (protobuf raised ValueError, an incident)."""
    async def forward(leader: str, ask: Any) -> Any:
        consumer_commit_request(ask)  # what the peer client sends
        raise ApiError(Code.NETWORK_ERROR, "not sent", leader)

    node = SimpleNamespace(role=Role.FOLLOWER, leader_id="n2", config=SimpleNamespace(self_id="n1"))
    service = SimpleNamespace(limits=ApiLimits(), node=node, peers=SimpleNamespace(commit_consumer=forward))
    commits = ConsumerCommits(service)  # type: ignore[arg-type]
    for call in (commits.commit("billing", 1, "", 2**63, caller=LOCAL), commits.delete("billing", 2**63, caller=LOCAL)):
        with pytest.raises(ApiError) as refused:
            await call
        assert refused.value.status == 400


async def test_incident_tracebacks_are_logged_once_a_second_per_kind_with_a_count_of_the_rest(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Five RuntimeErrors and a KeyError at once, a RuntimeError half a second later, one a second
    after the first: three tracebacks, the last counting the five left out. Each caller still gets
    its own incident id."""
    now = [0.0]
    monkeypatch.setattr(errors, "INCIDENTS", LogThrottle(clock=lambda: now[0]))
    answers = [api_error(RuntimeError("boom")) for _ in range(5)] + [api_error(KeyError("k"))]
    now[0] = 0.5
    answers.append(api_error(RuntimeError("boom")))
    now[0] = 1.0
    answers.append(api_error(RuntimeError("boom")))
    assert {a.code for a in answers} == {Code.INTERNAL_ERROR} and len({a.message for a in answers}) == 8
    logged = incidents(caplog)
    assert [r.exc_info[0] for r in logged if r.exc_info] == [RuntimeError, KeyError, RuntimeError]
    assert "(and 5 more RuntimeError incidents since the last line)" in logged[-1].getMessage()


def test_a_throttle_lets_a_line_a_second_through_per_kind() -> None:
    now = [10.0]
    throttle = LogThrottle(clock=lambda: now[0])
    assert [throttle.admit("a"), throttle.admit("a"), throttle.admit("b"), throttle.admit("a")] == [0, None, 0, None]
    now[0] = 10.999
    assert throttle.admit("a") is None
    now[0] = 11.0
    assert throttle.admit("a") == 3 and throttle.admit("b") == 0 and throttle.admit("a") is None
