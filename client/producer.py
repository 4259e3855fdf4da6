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
The session's first batch goes alone, so that the others follow one the group
has taken.

A session the group no longer has (UNKNOWN_PRODUCER: it expired after
producer_idle_entries of log time, or was closed) is replaced by a new one (a
new id: the group forgot the old one's epochs, so the same id opened again
could take a late batch of the old session as its own): the batches not yet
answered are numbered again from 0 and sent in it,
except those whose outcome the producer cannot know (an attempt went
unanswered while the old session lived): each of those fails with
OUTCOME_UNKNOWN, for the application to decide (it is in the log once, or not
at all). The session is the caller's own (the name of its token): the
producer closes it when it is closed.
Entries not yet answered are bounded by `buffer_entries`: `send` waits for
room (back-pressure). `flush` waits for every entry sent so far, `close`
too, and then ends the session's sender.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import httpx

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
    __slots__ = ("answer", "bodies", "done", "error", "future", "maybe_appended", "sequence", "size")

    def __init__(self, future: asyncio.Future[None]) -> None:
        self.bodies: list[bytes] = []
        self.size = 0
        self.sequence = -1
        self.maybe_appended = False  # an attempt went unanswered: it may be in the log
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
        self._calls_out = 0  # appends sent and not yet answered (renewing the session waits for none)
        self._quiet: asyncio.Event | None = None  # set while _calls_out is 0
        self._renewed: asyncio.Event | None = None  # cleared while the session is opened again

    async def start(self) -> AsyncProducer:
        """Take the producer session (POST /v1/producers) and start sending."""
        self._loop = asyncio.get_running_loop()
        self._wake, self._has_room = asyncio.Event(), asyncio.Event()
        self._quiet, self._renewed = asyncio.Event(), asyncio.Event()
        self._quiet.set()
        self._renewed.set()
        await self._open_session()
        self._sender = asyncio.create_task(self._send_batches())
        return self

    async def _open_session(self) -> None:
        """POST /v1/producers: a new session, or the next epoch of `producer_id`'s."""
        body = {} if self.producer_id is None else {"id": self.producer_id}
        session = (await self.connection.retried("POST", "/v1/producers", json=body)).json()
        self.producer_id, self.epoch = session["id"], session["epoch"]

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
        """Flush, stop the sender, and close the session (it no longer counts against the caller's
        producer_sessions_per_name_max)."""
        try:
            await self.flush()
        finally:
            if self._sender is not None:
                self._sender.cancel()
                await asyncio.gather(self._sender, return_exceptions=True)
                self._sender = None
                with contextlib.suppress(RaftlogError):  # gone already, or no answer: it expires in log time
                    await self.connection.retried("DELETE", f"/v1/producers/{self.producer_id}", until_s=5.0)

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
        attempt = out_of_order = 0
        assert self._renewed is not None
        while True:
            await self._renewed.wait()
            if batch.done.is_set():  # reported when the session was opened again
                return
            if self._failure is not None:
                return self._settle(batch, error=self._failure)
            epoch = self.epoch
            headers = {"content-type": BATCH_CONTENT_TYPE, "x-raftlog-producer-id": str(self.producer_id),
                       "x-raftlog-producer-epoch": str(epoch), "x-raftlog-sequence": str(batch.sequence)}
            try:
                response = await self._attempt(batch, content, headers)
            except RaftlogError as exc:
                if epoch != self.epoch:  # refused in a session opened again since: sent again in the new one
                    continue
                if exc.code == "UNKNOWN_PRODUCER":  # the group has no record of the session now
                    await self._renew(epoch)
                    continue
                if exc.code == "OUT_OF_ORDER_SEQUENCE":  # a batch before it has not arrived yet
                    out_of_order += batch is self._in_flight[0]
                    if out_of_order > OUT_OF_ORDER_MAX:  # none before it is on its way: it cannot go on
                        self._failure = exc
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
            await self.connection.note_leader(response.json().get("leader"))
            return

    async def _attempt(self, batch: _Batch, content: bytes, headers: dict[str, str]) -> httpx.Response:
        """One append of `batch`, its outcome noted in it before any other task runs: answered (the
        batch settled), or unknown (it may be in the log)."""
        assert self._quiet is not None
        self._calls_out += 1
        self._quiet.clear()
        try:
            response = await self.connection.call("POST", "/v1/entries/batch", content=content, headers=headers)
            self._settle(batch, answer=response.json())
            return response
        except RaftlogError as exc:
            batch.maybe_appended = batch.maybe_appended or exc.outcome_unknown
            raise
        finally:
            self._calls_out -= 1
            if not self._calls_out:
                self._quiet.set()

    async def _renew(self, epoch: int) -> None:
        """The session of `epoch` is gone: once no append is out, open a new one, report the batches
        that may be in the log, and number the others again from 0 (in their order)."""
        assert self._renewed is not None and self._quiet is not None
        if epoch != self.epoch or not self._renewed.is_set():
            await self._renewed.wait()  # another batch's refusal renews it
            return
        self._renewed.clear()
        try:
            await self._quiet.wait()
            self.producer_id = None  # a new id: the group forgot the old one's epochs, so a late batch of
            await self._open_session()  # its could be taken in a session of the same id opened again
            sequence = 0
            for batch in [*self._in_flight, *self._sealed]:
                if batch.done.is_set():
                    continue
                if batch.maybe_appended:
                    self._settle(batch, error=RaftlogError(
                        "OUTCOME_UNKNOWN", f"producer {self.producer_id}'s session ended while this batch's "
                        "outcome was unknown: it is in the log once, or not at all", 0))
                    continue
                batch.sequence = sequence
                sequence += len(batch.bodies)
            self._next_sequence = sequence
            self._established = False
        except RaftlogError as exc:
            self._failure = exc
        finally:
            self._renewed.set()

    async def _before_answered(self, batch: _Batch) -> None:
        """Wait until the batch before `batch` in sequence order is answered (or a moment, if none is)."""
        index = self._in_flight.index(batch)
        if index == 0:
            await asyncio.sleep(BACKOFF_S[0])
        else:
            await asyncio.wait([self._in_flight[index - 1].future])

    def _settle(self, batch: _Batch, *, answer: dict[str, Any] | None = None,
                error: BaseException | None = None) -> None:
        if batch.done.is_set():
            return
        batch.answer, batch.error = answer, error
        self._established = self._established or answer is not None
        batch.done.set()
        batch.future.set_result(None)
        (self._in_flight if batch in self._in_flight else self._sealed).remove(batch)
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
