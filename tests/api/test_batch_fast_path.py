"""Batch appends answered by api.fast_path, ahead of FastAPI: the same answers, errors, headers, token
checks, limits and request counts as the documented FastAPI route gives the same request.

Each request goes twice through the whole stack the client port serves (request counter, limits,
token check): once with the fast path in place, once with FastAPI where the fast path was."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.api.bodies import BATCH_CONTENT_TYPE, BatchTooLargeError, decode_bodies, encode_bodies
from raftlog.api.entry_handlers import decode_body, json_batch_bodies, parse_model
from raftlog.api.errors import ApiError
from raftlog.api.fast_path import EntryFastPath
from raftlog.api.schemas import NewBatch
from raftlog.app.launcher import SMALL_FILES, free_ports
from raftlog.app.node import Node
from raftlog.app.settings import load_settings

WRITER = "writer-token-0123456789"
READER = "reader-token-0123456789"
LIMITS = {"max_entry_bytes": 1000, "max_request_bytes": 20_000, "max_batch_entries": 50}
COMPARED_HEADERS = ("content-type", "content-length", "retry-after", "www-authenticate")
BATCH = "/v1/entries/batch"
AS_BATCH = {"content-type": BATCH_CONTENT_TYPE}
AS_JSON = {"content-type": "application/json"}


class Stack:
    """The node's client-port app, with a switch between the fast path and FastAPI, and a record of
    the requests that reached FastAPI."""

    def __init__(self, node: Node) -> None:
        self.outer = node.public_asgi
        parent = self.outer
        while not isinstance(parent.app, EntryFastPath):  # the layer above the fast path: the token check
            parent = parent.app
        self.parent, self.fast_path = parent, parent.app
        self.fastapi = self.fast_path.app
        self.reached_fastapi: list[str] = []

        async def watched(scope, receive, send):  # type: ignore[no-untyped-def]
            self.reached_fastapi.append(f"{scope['method']} {scope['path']}")
            await self.fastapi(scope, receive, send)

        watched.router = self.fastapi.router  # type: ignore[attr-defined]  # where the fast path finds routes
        self.fast_path.app = watched
        self.watched = watched

    def use(self, fast: bool) -> None:
        self.parent.app = self.fast_path if fast else self.watched


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    (peer,) = free_ports(1)
    node = await Node.open(load_settings({"id": "n1", "peers": f"n1-127.0.0.1:{peer}", "data_dir": tmp_path / "n1",
                                          **SMALL_FILES, **LIMITS, "tokens": f"writer:{WRITER},reader:{READER}"}))
    node.start()
    try:
        await node.raft.wait_for_leadership()
        assert await node.raft.wait_committed(0, 10.0)
        yield node
    finally:
        await node.stop()


@pytest.fixture
async def both(node: Node) -> AsyncIterator[Callable[..., Any]]:
    """`await both(**request)`: the answers of the fast path and of FastAPI to the same request."""
    stack = Stack(node)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=stack.outer), base_url="http://127.0.0.1") as client:

        async def send(fast: bool, headers: dict[str, str] | None = None, **request: Any) -> httpx.Response:
            stack.use(fast)
            reached = len(stack.reached_fastapi)
            content = request.pop("stream", None)
            if content is not None:  # a body without Content-Length: the limits count it as it arrives
                async def chunks(parts: list[bytes] = content) -> AsyncIterator[bytes]:
                    for part in parts:
                        yield part

                request["content"] = chunks()
            response = await client.post(BATCH, headers={"authorization": f"Bearer {WRITER}", **(headers or {})},
                                         **request)
            if fast:  # FastAPI answers the other, unless the limits or the token check refused it first
                assert len(stack.reached_fastapi) == reached, "FastAPI answered it"
            return response

        async def fast_and_slow(**request: Any) -> tuple[httpx.Response, httpx.Response]:
            fast = await send(True, **request)
            slow = await send(False, **request)
            return fast, slow

        yield fast_and_slow
    stack.use(True)


def same_answer(fast: httpx.Response, slow: httpx.Response) -> None:
    assert (fast.status_code, fast.content) == (slow.status_code, slow.content)
    assert {h: fast.headers.get(h) for h in COMPARED_HEADERS} == {h: slow.headers.get(h) for h in COMPARED_HEADERS}


def body_of(entry: dict[str, Any]) -> bytes:
    return entry["body"].encode() if entry["encoding"] == "utf-8" else base64.b64decode(entry["body"])


GOOD = [
    ("json utf-8", {"json": {"entries": [{"body": "a"}, {"body": "ü€😀"}, {"body": "c", "encoding": "utf-8"}]}}),
    ("json base64", {"json": {"entries": [{"body": "AP8=", "encoding": "base64"}, {"body": "x"}]}}),
    ("json with a charset", {"content": b'{"entries": [{"body": "a"}]}',
                             "headers": {"content-type": "application/json; charset=utf-8"}}),
    ("+json type", {"content": b'{"entries":[{"body":"a"}]}', "headers": {"content-type": "application/x+json"}}),
    ("binary", {"content": encode_bodies([b"\x00\xff", b"b" * 1000, b"c"]), "headers": AS_BATCH}),
    ("binary, type in capitals, parameters", {"content": encode_bodies([b"d"]),
                                               "headers": {"content-type": BATCH_CONTENT_TYPE.upper() + "; x=1"}}),
    ("largest batch", {"content": encode_bodies([b"e"] * 50), "headers": AS_BATCH}),
    ("a query string", {"content": encode_bodies([b"f"]), "headers": AS_BATCH, "params": {"x": "1"}}),
]


@pytest.mark.parametrize(("case", "request_args"), GOOD, ids=[case for case, _ in GOOD])
async def test_a_batch_is_appended_as_fastapi_appends_it(node: Node, both: Callable[..., Any], case: str,
                                                         request_args: dict[str, Any]) -> None:
    fast, slow = await both(**request_args)
    assert fast.status_code == slow.status_code == 201, fast.text
    assert {h: fast.headers.get(h) for h in ("content-type", "retry-after")} == \
           {h: slow.headers.get(h) for h in ("content-type", "retry-after")}
    a, b = fast.json(), slow.json()
    assert a.keys() == b.keys() == {"first_index", "last_index", "term", "positions", "leader", "duplicate"}
    assert (a["term"], a["leader"]) == (b["term"], b["leader"]) == (node.raft.term, "n1")
    count = a["last_index"] - a["first_index"] + 1
    assert len(a["positions"]) == len(b["positions"]) == count == b["last_index"] - b["first_index"] + 1
    assert b["first_index"] == a["last_index"] + 1
    shift = b["positions"][0] - a["positions"][0]
    assert [p + shift for p in a["positions"]] == b["positions"]  # the same entries, one after the other
    read = [node.store.get(i) for i in range(a["first_index"], b["last_index"] + 1)]
    assert [bytes(e.body) for e in read[:count]] == [bytes(e.body) for e in read[count:]]
    assert [e.pos for e in read] == a["positions"] + b["positions"]


def bad_json(text: str) -> dict[str, Any]:
    return {"content": text.encode("utf-8", "surrogatepass"), "headers": AS_JSON}


BAD = [
    ("bad base64", {"json": {"entries": [{"body": "a"}, {"body": "%%%", "encoding": "base64"}]}}, 400,
     "UNEXPECTED_ARGUMENT"),
    ("base64 beyond ASCII", {"json": {"entries": [{"body": "YQ==é", "encoding": "base64"}]}}, 400,
     "UNEXPECTED_ARGUMENT"),
    ("empty JSON batch", {"json": {"entries": []}}, 400, "REQUEST_WITH_EMPTY_BODYS"),
    ("empty binary batch", {"content": b"", "headers": AS_BATCH}, 400, "REQUEST_WITH_EMPTY_BODYS"),
    ("empty entry", {"json": {"entries": [{"body": "a"}, {"body": ""}]}}, 400, "REQUEST_WITH_EMPTY_BODYS"),
    ("empty binary entry", {"content": encode_bodies([b"a", b""]), "headers": AS_BATCH}, 400,
     "REQUEST_WITH_EMPTY_BODYS"),
    ("too many JSON entries", {"json": {"entries": [{"body": "a"}] * 51}}, 413, "UNEXPECTED_ARGUMENT"),
    ("too many binary entries", {"content": encode_bodies([b"a"] * 51), "headers": AS_BATCH}, 413,
     "UNEXPECTED_ARGUMENT"),
    ("entry over max_entry_bytes", {"json": {"entries": [{"body": "a"}, {"body": "x" * 1001}]}}, 413,
     "UNEXPECTED_ARGUMENT"),
    ("binary entry over max_entry_bytes", {"content": encode_bodies([b"x" * 1001]), "headers": AS_BATCH}, 413,
     "UNEXPECTED_ARGUMENT"),
    ("Content-Length over max_request_bytes", {"content": encode_bodies([b"y" * 900] * 30), "headers": AS_BATCH},
     413, "UNEXPECTED_ARGUMENT"),
    ("streamed over max_request_bytes", {"stream": [encode_bodies([b"y" * 900] * 15)] * 2, "headers": AS_BATCH},
     413, "UNEXPECTED_ARGUMENT"),
    ("streamed, well", {"stream": [encode_bodies([b"s"]), encode_bodies([b"t"])], "headers": AS_BATCH}, 201, None),
    ("cut binary batch", {"content": encode_bodies([b"ok"])[:-1], "headers": AS_BATCH}, 400, "UNEXPECTED_ARGUMENT"),
    ("cut length prefix", {"content": encode_bodies([b"ok"]) + b"\x00\x00", "headers": AS_BATCH}, 400,
     "UNEXPECTED_ARGUMENT"),
    ("text", {"content": b"a", "headers": {"content-type": "text/plain"}}, 415, "UNEXPECTED_ARGUMENT"),
    ("no content type", {"content": encode_bodies([b"a"])}, 415, "UNEXPECTED_ARGUMENT"),
    ("octets", {"content": encode_bodies([b"a"]), "headers": {"content-type": "application/octet-stream"}}, 415,
     "UNEXPECTED_ARGUMENT"),
    ("malformed JSON", bad_json("{not json"), 400, "UNEXPECTED_ARGUMENT"),
    ("an extra field", {"json": {"entries": [{"body": "a", "x": 1}]}}, 400, "UNEXPECTED_ARGUMENT"),
    ("an extra top field", {"json": {"entries": [{"body": "a"}], "x": 1}}, 400, "UNEXPECTED_ARGUMENT"),
    ("a number body", {"json": {"entries": [{"body": 1}]}}, 400, "UNEXPECTED_ARGUMENT"),
    ("no body", {"json": {"entries": [{"encoding": "utf-8"}]}}, 400, "UNEXPECTED_ARGUMENT"),
    ("null encoding", {"json": {"entries": [{"body": "a", "encoding": None}]}}, 400, "UNEXPECTED_ARGUMENT"),
    ("unknown encoding", {"json": {"entries": [{"body": "a", "encoding": "latin-1"}]}}, 400,
     "UNEXPECTED_ARGUMENT"),
    ("entries not a list", {"json": {"entries": {"body": "a"}}}, 400, "UNEXPECTED_ARGUMENT"),
    ("a list", {"json": [{"body": "a"}]}, 400, "UNEXPECTED_ARGUMENT"),
    ("a lone surrogate", bad_json('{"entries": [{"body": "\\ud800"}]}'), 400, "UNEXPECTED_ARGUMENT"),
    ("not UTF-8", {"content": b'{"entries": [{"body": "\xff"}]}', "headers": AS_JSON}, 400, "UNEXPECTED_ARGUMENT"),
    ("a BOM", {"content": b'\xef\xbb\xbf{"entries": [{"body": "a"}]}', "headers": AS_JSON}, 400,
     "UNEXPECTED_ARGUMENT"),
    ("NaN beside", bad_json('{"entries": [{"body": "a"}], "x": NaN}'), 400, "UNEXPECTED_ARGUMENT"),
    ("nested arrays", bad_json('{"entries": ' + "[" * 120 + "]" * 120 + "}"), 400, "UNEXPECTED_ARGUMENT"),
    ("more arrays than 50 entries may hold", bad_json('{"entries": ' + "[" * 5000 + "]" * 5000 + "}"), 413,
     "UNEXPECTED_ARGUMENT"),
]


@pytest.mark.parametrize(("case", "request_args", "status", "code"), BAD, ids=[case[0] for case in BAD])
async def test_a_bad_batch_gets_fastapis_error(node: Node, both: Callable[..., Any], case: str,
                                               request_args: dict[str, Any], status: int, code: str | None) -> None:
    end = node.store.end_index
    fast, slow = await both(**request_args)
    if status == 201:
        assert fast.status_code == slow.status_code == 201
        return
    same_answer(fast, slow)
    assert fast.status_code == status, fast.text
    assert fast.json()["error"]["code"] == code and fast.json()["error"]["message"]
    assert node.store.end_index == end  # nothing appended


TOKEN_CASES = [
    ("no token", None, 401, "UNAUTHENTICATED"),
    ("an unknown token", "not-a-token-0123456789abc", 401, "UNAUTHENTICATED"),
    ("a reader's token", READER, 403, "PERMISSION_DENIED"),
]


@pytest.mark.parametrize(("case", "token", "status", "code"), TOKEN_CASES, ids=[c[0] for c in TOKEN_CASES])
async def test_a_batch_needs_a_writers_token(node: Node, case: str, token: str | None, status: int, code: str) -> None:
    stack = Stack(node)
    answers = []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=stack.outer), base_url="http://127.0.0.1") as client:
        for fast in (True, False):
            stack.use(fast)
            headers = {"authorization": f"Bearer {token}"} if token else {}
            for request in ({"json": {"entries": [{"body": "a"}]}, "headers": headers},
                            {"content": encode_bodies([b"a"]), "headers": {**AS_BATCH, **headers}}):
                answers.append(await client.post(BATCH, **request))
    assert stack.reached_fastapi == []  # refused before either path
    for answer in answers[1:]:
        same_answer(answers[0], answer)
    assert answers[0].status_code == status and answers[0].json()["error"]["code"] == code
    assert (answers[0].headers.get("www-authenticate") is not None) is (status == 401)


async def test_batches_on_the_fast_path_are_counted_under_their_route(node: Node, both: Callable[..., Any]) -> None:
    for request in ({"json": {"entries": [{"body": "a"}]}}, {"json": {"entries": []}},
                    {"content": encode_bodies([b"a"]), "headers": AS_BATCH}):
        await both(**request)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=node.public_asgi), base_url="http://127.0.0.1") as c:
        await c.post(BATCH, json={"entries": [{"body": "a"}]})  # no token
        text = (await c.get("/metrics")).text
    route = 'raftlog_http_requests_total{method="POST",route="/v1/entries/batch",status="%s"} %s'
    assert route % (201, "4.0") in text and route % (400, "2.0") in text and route % (401, "1.0") in text
    assert 'raftlog_append_requests_total{code="SUCCESS"} 4.0' in text
    assert 'raftlog_append_requests_total{code="REQUEST_WITH_EMPTY_BODYS"} 2.0' in text
    assert "raftlog_appended_entries_total 4.0" in text


# -- the JSON batch reader: json.loads for the common form, NewBatch for the rest --------------


MAX_ENTRIES = 10_000  # the default max_batch_entries: no document here reaches it


def by_model(data: bytes) -> list[bytes] | str:
    """What the route answered before `json_batch_bodies`: NewBatch's bodies, or the error's message."""
    try:
        return [decode_body(e) for e in parse_model(NewBatch, data).entries]
    except ApiError as exc:
        return f"{exc.status} {exc.code.name}: {exc.message}"


def by_reader(data: bytes) -> list[bytes] | str:
    try:
        return json_batch_bodies(data, MAX_ENTRIES)
    except ApiError as exc:
        return f"{exc.status} {exc.code.name}: {exc.message}"


TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=8)  # lone surrogates included
VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                      max_leaves=6)
ENCODINGS = st.sampled_from(["utf-8", "base64", "UTF-8", "", None])
ENTRY = st.fixed_dictionaries({"body": TEXT | st.sampled_from(["YQ==", "YWI=", "Y", "%%", "YQ==\n"]) | VALUES},
                              optional={"encoding": ENCODINGS, "x": VALUES})
BATCH_DOC = (st.fixed_dictionaries({"entries": st.lists(ENTRY, max_size=4)}, optional={"x": VALUES})
             | st.fixed_dictionaries({"entries": VALUES}) | VALUES)


@settings(max_examples=600, derandomize=True, deadline=None)
@given(BATCH_DOC, st.data())
def test_the_json_batch_reader_answers_as_the_model_does(doc: Any, data: st.DataObject) -> None:
    text = json.dumps(doc, ensure_ascii=data.draw(st.booleans()))
    raw = text.encode("utf-8", "surrogatepass")
    cut = data.draw(st.integers(0, len(raw)))
    for variant in (raw, raw[:cut] + raw[cut + 1:], raw[:cut] + data.draw(st.binary(max_size=3)) + raw[cut:]):
        assert by_reader(variant) == by_model(variant)


def test_the_json_batch_reader_reads_the_common_form_without_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    def unused(*_args: Any) -> None:
        raise AssertionError("the model was used")

    monkeypatch.setattr("raftlog.api.entry_handlers.parse_model", unused)
    batch = {"entries": [{"body": "a"}, {"body": "YQ==", "encoding": "base64"}, {"body": "é", "encoding": "utf-8"}]}
    assert json_batch_bodies(json.dumps(batch).encode(), 3) == [b"a", b"a", "é".encode()]


# -- limits while decoding: a batch stops at max_batch_entries + 1 entries ---------------------------


VALID_ENTRY = st.fixed_dictionaries({"body": st.text(min_size=1, max_size=8)},
                                    optional={"encoding": st.just("utf-8")})


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.lists(VALID_ENTRY, min_size=1, max_size=20), st.booleans())
def test_a_json_batch_of_max_batch_entries_is_taken_whatever_its_bodies_hold(entries: list[Any],
                                                                           spaced: bool) -> None:
    data = json.dumps({"entries": entries}, indent=1 if spaced else None).encode()
    assert json_batch_bodies(data, len(entries)) == [e["body"].encode() for e in entries]
    if len(entries) > 1:
        with pytest.raises(ApiError) as refused:
            json_batch_bodies(data, len(entries) - 1 - len(entries) // 2)  # the bound leaves no room for half
        assert refused.value.status == 413


@pytest.mark.parametrize("doc", [b'{"entries": [' + b",".join([b'{"body": ""}'] * 200_000) + b"]}",
                                 b'{"entries": [' + b",".join([b"1"] * 200_000) + b"]}",
                                 b"[" * 10 + b"[]," * 200_000 + b"]" * 10])
def test_a_json_batch_over_the_limit_is_refused_before_it_is_decoded(monkeypatch: pytest.MonkeyPatch,
                                                                    doc: bytes) -> None:
    def unused(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("the batch was decoded")

    monkeypatch.setattr("raftlog.api.entry_handlers.json.loads", unused)
    monkeypatch.setattr("raftlog.api.entry_handlers.parse_model", unused)
    with pytest.raises(ApiError) as refused:
        json_batch_bodies(doc, 10_000)
    assert (refused.value.status, refused.value.code.name) == (413, "UNEXPECTED_ARGUMENT")
    assert "max_batch_entries" in refused.value.message


def structure_outside_strings(data: bytes) -> int:
    """The objects, arrays and commas of a JSON text outside its strings, one byte at a time: the
    naive count that check_json_values must agree with."""
    count, in_string, escaped = 0, False, False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in b"{[,":
            count += 1
    return count


TRICKY_TEXT = st.text(st.sampled_from('"\\,{[]}a\u00e9'), max_size=12)


@settings(max_examples=400, derandomize=True, deadline=None)
@given(st.lists(st.fixed_dictionaries({"body": TRICKY_TEXT}, optional={"encoding": st.just("utf-8")}),
                min_size=1, max_size=12), st.integers(1, 12))
def test_the_pre_count_agrees_with_a_byte_by_byte_scan(entries: list[Any], max_entries: int) -> None:
    """Quotes, backslashes and structure inside bodies are not counted; outside they are."""
    data = json.dumps({"entries": entries}).encode()
    over = structure_outside_strings(data) > 3 * max_entries + 1
    try:
        json_batch_bodies(data, max_entries)
    except ApiError as exc:
        assert (exc.status, over) == (413, True)
    else:
        assert not over


HOSTILE_BATCHES = {  # a head, a unit repeated up to the body limit, and the answer
    # audit H1: the regex rescanned from every quote; it is one unterminated string, so not JSON
    "a quote, then escaped quotes and commas": (b'"', b'\\",', 400),
    "empty strings and commas": (b'{"entries":[', b'"",', 413),  # a regex's match each would cost seconds
    "escaped backslashes and commas": (b'"', b'\\\\,', 400),
    "commas in one string": (b'{"entries":[{"body":"', b",", 400),
    # audit A, L2: under the pre-count's bound, and int() costs 80 µs a number (2 s at the limit)
    "numbers of 4,300 digits": (b'{"entries":[', b"9" * 4300 + b",", 400),
}


@pytest.mark.parametrize("name", HOSTILE_BATCHES)
def test_a_hostile_json_batch_at_the_body_limit_is_refused_in_one_pass(name: str) -> None:
    """A body of max_request_bytes (64 MiB) shaped against the pre-count gets its 413; the route's
    liveness under it is tests/e2e/test_linear_input.py's."""
    head, unit, status = HOSTILE_BATCHES[name]
    body = (head + unit * ((64 << 20) // len(unit)))[:64 << 20]
    with pytest.raises(ApiError) as refused:
        json_batch_bodies(body, MAX_ENTRIES)
    assert (refused.value.status, refused.value.code.name) == (status, "UNEXPECTED_ARGUMENT")


def test_a_batch_nested_past_jsons_recursion_limit_answers_as_the_model_does() -> None:
    doc = b'{"entries": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    assert by_reader(doc) == by_model(doc)
    assert str(by_reader(doc)).startswith("400 UNEXPECTED_ARGUMENT")


def test_a_400_names_the_first_problems_and_counts_the_rest() -> None:
    doc = json.dumps({"entries": [{"body": i} for i in range(1000)]}).encode()
    with pytest.raises(ApiError) as refused:
        json_batch_bodies(doc, 10_000)
    assert refused.value.status == 400
    assert refused.value.message.count("Input should be a valid string") == 10
    assert refused.value.message.endswith("; and 990 more")


def test_a_binary_batch_stops_at_the_entry_after_max_batch_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    data = bytes(4) * 1_000_000  # a million empty bodies
    assert len(decode_bodies(encode_bodies([b"a"] * 50), 50)) == 50
    taken = []
    monkeypatch.setattr("raftlog.api.bodies.LENGTH", type("Counted", (), {"unpack_from": staticmethod(
        lambda data, offset: taken.append(offset) or (0,))}))
    with pytest.raises(BatchTooLargeError):
        decode_bodies(data, 50)
    assert len(taken) == 50  # no length read beyond the 51st entry's
