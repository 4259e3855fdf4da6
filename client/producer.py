"""A producer: entries batched by size and linger, appended exactly once in a producer session.

`send` puts an entry in the open batch and returns at once with its pending
answer (await it, or `.result()`). A batch goes when it is full or when its
first entry has waited `linger_ms`; at most `max_in_flight` batches (5, what
a member keeps of a producer) are on their way at once, in sequence order.
A batch whose outcome is unknown (no answer, 502, 503, 504) is sent again,
the same entries with the same sequence, through any member, until the group
answers: the session makes the retry safe (a batch that went in is answered
with its original entries, `duplicate` set). A batch refused as out of order
(a batch before it had not arrived) waits for that one and is sent again.
The session's first batch goes alone: a member takes any sequence from a
producer it has no record of, so a later batch arriving first would leave the
earlier ones out of order for good.
Entries not yet answered are bounded by `buffer_entries`: `send` waits for
room (back-pressure). `flush` waits for every entry sent so far, `close`
too, and then ends the session's sender.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from raftlog.api.bodies import BATCH_CONTENT_TYPE, encode_bodies
from raftlog.client.connection import BACKOFF_S, RETRY_LATER, Connection, LoopThread, RaftlogError

MAX_IN_FLIGHT = 5  # producer_batches_kept's default: a member answers a retry of any of the last 5 batches
OUT_OF_ORDER_MAX = 50  # refusals of the first batch in flight, none before it, until the session is given up


@dataclass(frozen=True, slots=True)
class Appended:
    """Where an entry went: its index, term and byte position; `duplicate`: a retry answered with the
    entry the group had appended before."""

    index: int
    term: int
    pos: int
    duplicate: bool


class _Batch:
    __slots__ = ("answer", "bodies", "done", "error", "future", "sequence", "size")

    def __init__(self, future: asyncio.Future[None]) -> None:
        self.bodies: list[bytes] = []
        self.size = 0
        self.sequence = -1
        self.answer: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()  # for .result() from other threads
        self.future = future  # for await, in the producer's loop


class Pending:
    """One entry's answer to come: `await` it, or `.result(timeout)` from any thread."""

    __slots__ = ("_batch", "_offset")

    def __init__(self, batch: _Batch, offset: int) -> None:
        self._batch, self._offset = batch, offset

    def done(self) -> bool:
        return self._batch.done.is_set()

    def result(self, timeout: float | None = None) -> Appended:
        if not self._batch.done.wait(timeout):
            raise TimeoutError("the entry is not answered yet")
        return self._outcome()

    def __await__(self) -> Generator[Any, None, Appended]:
        yield from asyncio.shield(self._batch.future).__await__()
        return self._outcome()

    def _outcome(self) -> Appended:
        batch = self._batch
        if batch.error is not None:
            raise batch.error
        answer = batch.answer
        assert answer is not None
        k = self._offset
        return Appended(answer["first_index"] + k, answer["term"], answer["positions"][k], answer["duplicate"])


class AsyncProducer:
    """Use as `async with AsyncProducer(connection) as producer:`; `producer_id` resumes a session
    under its id at the next epoch (fencing the one before); without it, a new session."""

    def __init__(self, connection: Connection, *, linger_ms: float = 5.0, batch_entries: int = 10_000,
                 batch_bytes: int = 4 << 20, buffer_entries: int = 500_000, max_in_flight: int = MAX_IN_FLIGHT,
                 producer_id: int | None = None) -> None:
        if not 1 <= max_in_flight <= MAX_IN_FLIGHT:
            raise ValueError(f"max_in_flight is 1 to {MAX_IN_FLIGHT}: a member keeps a producer's last "
                             f"{MAX_IN_FLIGHT} batches, so only those can be retried safely")
        if batch_entries > buffer_entries:
            raise ValueError("buffer_entries must hold at least one batch")
        self.connection = connection
        self.linger_s = linger_ms / 1000
        self.batch_entries, self.batch_bytes, self.buffer_entries = batch_entries, batch_bytes, buffer_entries
        self.max_in_flight = max_in_flight
        self.producer_id, self.epoch = producer_id, 0
        self.retried = 0  # batches sent again: their first answer never came
        self._loop: asyncio.AbstractEventLoop | None = None
        self._open: _Batch | None = None
        self._sealed: deque[_Batch] = deque()
        self._in_flight: deque[_Batch] = deque()  # in sequence order
        self._next_sequence = 0
        self._buffered = 0  # entries sent and not yet answered
        self._has_room: asyncio.Event | None = None
        self._wake: asyncio.Event | None = None
        self._deliveries: set[asyncio.Task[None]] = set()
        self._sender: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None  # the session cannot go on (fenced, refused)
        self._established = False  # a batch was answered: the group has a record of the session

    async def start(self) -> AsyncProducer:
        """Take the producer session (POST /v1/producers) and start sending."""
        self._loop = asyncio.get_running_loop()
        self._wake, self._has_room = asyncio.Event(), asyncio.Event()
        body = {} if self.producer_id is None else {"id": self.producer_id}
        session = (await self.connection.retried("POST", "/v1/producers", json=body)).json()
        self.producer_id, self.epoch = session["id"], session["epoch"]
        self._sender = asyncio.create_task(self._send_batches())
        return self

    async def __aenter__(self) -> AsyncProducer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- sending ---------------------------------------------------------------------------

    async def send(self, body: bytes) -> Pending:
        """Put `body` in the open batch (waiting while `buffer_entries` are unanswered)."""
        while (pending := self.add(body)) is None:
            assert self._has_room is not None
            self._has_room.clear()
            await self._has_room.wait()
        return pending

    def add(self, body: bytes) -> Pending | None:
        """`send` without waiting: None while the buffer is full. Runs in the producer's loop."""
        if self._failure is not None:
            raise self._failure
        if self._buffered >= self.buffer_entries:
            return None
        batch = self._open
        if batch is None:
            assert self._loop is not None, "start() the producer first"
            batch = self._open = _Batch(self._loop.create_future())
            self._loop.call_later(self.linger_s, self._linger_ended, batch)
        offset = len(batch.bodies)
        batch.bodies.append(body)
        batch.size += len(body) + 4
        self._buffered += 1
        if offset + 1 >= self.batch_entries or batch.size >= self.batch_bytes:
            self._seal()
        return Pending(batch, offset)

    def _linger_ended(self, batch: _Batch) -> None:
        if batch is self._open:
            self._seal()

    def _seal(self) -> None:
        batch, self._open = self._open, None
        if batch is None:
            return
        batch.sequence = self._next_sequence
        self._next_sequence += len(batch.bodies)
        self._sealed.append(batch)
        assert self._wake is not None
        self._wake.set()

    async def flush(self) -> None:
        """Send the open batch now, and wait until every entry sent so far is answered."""
        self._seal()
        waiting = [batch.future for batch in (*self._in_flight, *self._sealed)]
        if waiting:
            await asyncio.wait(waiting)

    async def close(self) -> None:
        """Flush, then stop the sender."""
        try:
            await self.flush()
        finally:
            if self._sender is not None:
                self._sender.cancel()
                await asyncio.gather(self._sender, return_exceptions=True)

    # -- the sender -----------------------------------------------------------------------

    async def _send_batches(self) -> None:
        assert self._wake is not None
        while True:
            while self._sealed and len(self._in_flight) < (self.max_in_flight if self._established else 1):
                batch = self._sealed.popleft()
                self._in_flight.append(batch)
                delivery = asyncio.create_task(self._deliver(batch))
                self._deliveries.add(delivery)
                delivery.add_done_callback(self._deliveries.discard)
            self._wake.clear()
            await self._wake.wait()

    async def _deliver(self, batch: _Batch) -> None:
        """The batch, sent until answered; whatever ends it, its entries are answered (never left waiting)."""
        try:
            await self._send_until_answered(batch)
        except Exception as exc:  # an answer it cannot read, or a bug: the session cannot go on
            self._failure = exc
            raise
        finally:
            if not batch.done.is_set():
                self._settle(batch, error=self._failure or RaftlogError("CLOSED", "the producer was closed", 0))

    async def _send_until_answered(self, batch: _Batch) -> None:
        content = encode_bodies(batch.bodies)
        headers = {"content-type": BATCH_CONTENT_TYPE, "x-raftlog-producer-id": str(self.producer_id),
                   "x-raftlog-producer-epoch": str(self.epoch), "x-raftlog-sequence": str(batch.sequence)}
        attempt = out_of_order = 0
        while True:
            if self._failure is not None:
                return self._settle(batch, error=self._failure)
            try:
                response = await self.connection.call("POST", "/v1/entries/batch", content=content, headers=headers)
            except RaftlogError as exc:
                if exc.code == "OUT_OF_ORDER_SEQUENCE":  # a batch before it has not arrived yet
                    out_of_order += batch is self._in_flight[0]
                    if out_of_order > OUT_OF_ORDER_MAX:  # none before it is on its way: the group lost the
                        self._failure = exc  # session's record (an idle producer forgotten): it cannot go on
                        return self._settle(batch, error=exc)
                    await self._before_answered(batch)
                elif exc.status not in (0, *RETRY_LATER):  # fenced, or refused: the session cannot go on
                    self._failure = exc
                    return self._settle(batch, error=exc)
                else:
                    await asyncio.sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
                attempt += 1
                self.retried += attempt == 1
                continue
            answer = response.json()
            await self.connection.note_leader(answer.get("leader"))
            return self._settle(batch, answer=answer)

    async def _before_answered(self, batch: _Batch) -> None:
        """Wait until the batch before `batch` in sequence order is answered (or a moment, if none is)."""
        index = self._in_flight.index(batch)
        if index == 0:
            await asyncio.sleep(BACKOFF_S[0])
        else:
            await asyncio.wait([self._in_flight[index - 1].future])

    def _settle(self, batch: _Batch, *, answer: dict[str, Any] | None = None,
                error: BaseException | None = None) -> None:
        batch.answer, batch.error = answer, error
        self._established = self._established or answer is not None
        batch.done.set()
        batch.future.set_result(None)
        self._in_flight.remove(batch)
        self._buffered -= len(batch.bodies)
        assert self._wake is not None and self._has_room is not None
        self._wake.set()
        self._has_room.set()


class Producer:
    """The producer for synchronous code: an AsyncProducer in a thread of its own (its event loop).
    `send_many` hands a whole list over in one step (a `send` each costs a thread hop)."""

    def __init__(self, members: list[str], *, token: str | None = None, ca: str | None = None,
                 **options: Any) -> None:
        self._loop = LoopThread("raftlog-producer")
        self.connection = Connection(members, token=token, ca=ca)
        self._producer = AsyncProducer(self.connection, **options)
        self._loop.run(self._producer.start())

    @property
    def producer_id(self) -> int | None:
        return self._producer.producer_id

    def send(self, body: bytes) -> Pending:
        return self._loop.run(self._producer.send(body))

    def send_many(self, bodies: list[bytes]) -> list[Pending]:
        async def send_all() -> list[Pending]:
            return [await self._producer.send(body) for body in bodies]
        return self._loop.run(send_all())

    def flush(self) -> None:
        self._loop.run(self._producer.flush())

    def close(self) -> None:
        try:
            self._loop.run(self._producer.close())
            self._loop.run(self.connection.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
