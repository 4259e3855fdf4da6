"""A named consumer: the log's data entries in order, from its committed position on, following the log.

It starts after the position the group holds for its name (`start` when it
has none), reads one follow stream of the stored format at a time from one
member (the cheapest form to serve and to decode), and when that member
fails or stops, goes on from the next index through another. Its position is
the index of the last entry it handed out and was asked past (an entry is
processed once the next one is asked for, as Kafka's auto-commit counts
them); it is committed every `auto_commit_interval_s`, on `close`, or by
hand with `commit()`.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from raftlog.client.connection import BACKOFF_S, Connection, LoopThread, RaftlogError, error_of
from raftlog.storage.codec import BOOKKEEPING_MAGICS, HEADER, HEADER_SIZE, Stamp, decode_entry
from raftlog.storage.record import MissingHeadError, Record, Records

ENTRIES = "application/vnd.raftlog.entries"


class AsyncConsumer:
    """Use as `async with AsyncConsumer(connection, "billing") as consumer: async for record in consumer:`.
    `auto_commit_interval_s` None: commit by hand only."""

    def __init__(self, connection: Connection, name: str, *, start: int = 0,
                 auto_commit_interval_s: float | None = 5.0) -> None:
        self.connection = connection
        self.name = name
        self.start = start
        self.auto_commit_interval_s = auto_commit_interval_s
        self.position: int | None = None  # the last entry processed (None: none yet)
        self.committed: int | None = None  # the position last committed
        self._next: int | None = None  # the index to read next
        self._records: deque[Record] = deque()
        self._handed: int | None = None  # the last index handed out
        self._last_commit = 0.0
        self._stream: AsyncIterator[bytes] | None = None
        self._response: httpx.Response | None = None
        self._buffer = bytearray()
        self._records_of = Records()  # the log's records, one stream after another
        self.reconnects = 0

    async def __aenter__(self) -> AsyncConsumer:
        await self.resume()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def resume(self) -> int:
        """Where reading starts: after the committed position (the group's, for this name)."""
        try:
            found = (await self.connection.retried("GET", f"/v1/consumers/{self.name}")).json()
            self.committed = self.position = found["position"]
            self._next = found["position"] + 1
        except RaftlogError as exc:
            if exc.code != "CONSUMER_NOT_FOUND":
                raise
            self._next = self.start
        self._last_commit = time.monotonic()
        return self._next

    def __aiter__(self) -> AsyncConsumer:
        return self

    async def __anext__(self) -> Record:
        if self._handed is not None:
            self.position = self._handed  # asked past it: processed
        if self.auto_commit_interval_s is not None and self.position != self.committed and \
                time.monotonic() - self._last_commit >= self.auto_commit_interval_s:
            await self.commit()
        if not self._records:
            self._records.extend(await self.poll())
        record = self._records.popleft()
        self._handed = record.index
        return record

    async def poll(self) -> list[Record]:
        """The next entries the stream brings (at least one), skipping control entries."""
        if self._next is None:
            await self.resume()
        attempt = 0
        while True:
            try:
                if self._stream is None:
                    await self._open()
                assert self._stream is not None
                chunk = await anext(self._stream)
            except (httpx.HTTPError, RaftlogError, StopAsyncIteration) as exc:  # the member failed or stopped
                if isinstance(exc, RaftlogError) and 400 <= exc.status < 500:  # cleaned away, or not allowed:
                    raise  # no member would answer otherwise
                await self._close_stream()
                self.reconnects += 1
                await asyncio.sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
                attempt += 1
                continue
            records: list[Record] = []
            self._buffer += chunk
            while (missing := self._take(records)) is not None:  # the stream began inside a producer's batch
                self._records_of.know(missing, await self._head_stamp(missing))
            if records:
                return records

    def _take(self, records: list[Record]) -> int | None:
        """The records of the whole entries the stream has brought, control entries left out (DLedger's
        stored format; the stream's CRCs were checked by the member that read it). Stops at a
        continuation whose head came before the stream began: returns that head's index."""
        data = bytes(self._buffer)
        view, end = memoryview(data), 0
        try:
            while end + HEADER_SIZE <= len(data) and end + (size := HEADER.unpack_from(data, end)[1]) <= len(data):
                entry = decode_entry(view, end)
                if entry.magic not in BOOKKEEPING_MAGICS:  # else a control entry that only writers read
                    records.append(self._records_of(entry))
                end += size
                self._next = entry.index + 1
        except MissingHeadError as exc:
            return exc.head_index
        finally:
            del self._buffer[:end]
        return None

    async def _head_stamp(self, index: int) -> Stamp:
        """The stamp of the producer's batch head at `index`, as its raw answer's headers give it."""
        said = (await self.connection.retried("GET", f"/v1/entries/{index}",
                                              headers={"accept": "application/octet-stream"})).headers
        return Stamp(int(said["x-raftlog-producer-id"]), int(said["x-raftlog-producer-epoch"]),
                     int(said["x-raftlog-sequence"]))

    async def _open(self) -> None:
        connection = self.connection
        url = connection.member()
        request = connection.http.build_request("GET", f"{url}/v1/entries", headers={"accept": ENTRIES},
                                                params={"start": self._next, "follow": "true"}, timeout=None)
        response = await connection.http.send(request, stream=True)
        if response.status_code != 200:
            await response.aread()
            await response.aclose()
            connection.skip(url)
            raise error_of(response)
        self._response, self._stream = response, response.aiter_raw()
        self._buffer.clear()

    async def _close_stream(self) -> None:
        if self._response is not None:
            await self._response.aclose()
            self.connection.skip(str(self._response.url).split("/v1/")[0])
        self._response = self._stream = None

    async def commit(self, position: int | None = None) -> None:
        """Commit `position` (default: the last entry processed) as this consumer's, in the group's log."""
        position = self.position if position is None else position
        if position is None:
            return
        await self.connection.retried("PUT", f"/v1/consumers/{self.name}", json={"position": position})
        self.committed = position
        self._last_commit = time.monotonic()

    async def close(self) -> None:
        """Commit what was processed (with auto-commit on), and stop reading."""
        try:
            if self.auto_commit_interval_s is not None and self.position != self.committed:
                await self.commit()
        finally:
            await self._close_stream()


class Consumer:
    """The consumer for synchronous code: an AsyncConsumer in a thread of its own. Iterate it, or
    `poll()` for the next entries at once."""

    def __init__(self, members: list[str], name: str, *, token: str | None = None, ca: str | None = None,
                 **options: Any) -> None:
        self._loop = LoopThread("raftlog-consumer")
        self.connection = Connection(members, token=token, ca=ca)
        self._consumer = AsyncConsumer(self.connection, name, **options)
        self._loop.run(self._consumer.resume())

    @property
    def position(self) -> int | None:
        return self._consumer.position

    def poll(self) -> list[Record]:
        return self._loop.run(self._consumer.poll())

    def __iter__(self) -> Iterator[Record]:
        while True:
            yield self._loop.run(anext(self._consumer))

    def commit(self, position: int | None = None) -> None:
        self._loop.run(self._consumer.commit(position))

    def close(self) -> None:
        try:
            self._loop.run(self._consumer.close())
            self._loop.run(self.connection.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
