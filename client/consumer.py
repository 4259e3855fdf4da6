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
from typing import Any, NamedTuple

import httpx

from raftlog.client.connection import BACKOFF_S, Connection, LoopThread, RaftlogError, error_of
from raftlog.storage.codec import (
    BOOKKEEPING_MAGICS,
    DISTANCE,
    DISTANCE_SIZE,
    HEADER,
    HEADER_SIZE,
    SEQUENCE_BITS,
    STAMP,
    STAMP_SIZE,
    Magic,
)

ENTRIES = "application/vnd.raftlog.entries"
TYPES = {Magic.NORMAL: "normal", Magic.NOOP: "noop", Magic.CONFIG_CHANGE: "config_change"}
SEQUENCE_MASK = (1 << SEQUENCE_BITS) - 1


class Record(NamedTuple):
    index: int  # type: ignore[assignment]  # the entry's, over tuple.index
    term: int
    pos: int
    type: str  # normal, noop (a new leader's first entry), config_change
    body: bytes
    producer: tuple[int, int, int] | None = None  # the producer session's id, epoch and sequence, if any


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
        self._head: tuple[int, tuple[int, int, int]] | None = None  # the last producer's batch head decoded
        self._orphans: list[tuple[int, int]] = []  # (record, head index): continuations the stream began inside
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
            records = self._decode(chunk)
            if records is not None:
                if self._orphans:
                    await self._stamp_orphans(records)
                return records

    def _decode(self, chunk: bytes) -> list[Record] | None:
        """The whole entries the stream has brought so far, control entries left out (DLedger's stored
        format: storage.codec; the stream's CRCs were checked by the member that read it); None while
        none is whole."""
        buffer = self._buffer
        buffer += chunk
        data, end, size = bytes(buffer), 0, 0
        records: list[Record] = []
        append, unpack_header, unpack_stamp, produced, continued = records.append, HEADER.unpack_from, \
            STAMP.unpack_from, Magic.PRODUCED, Magic.CONTINUED
        while end + HEADER_SIZE <= len(data):
            magic, size, index, term, pos, *_rest = unpack_header(data, end)
            if end + size > len(data):
                break
            if magic == produced:
                producer_id, rest = unpack_stamp(data, end + HEADER_SIZE)
                self._head = (index, (producer_id, rest >> SEQUENCE_BITS, rest & SEQUENCE_MASK))
                append(Record(index, term, pos, "normal", data[end + HEADER_SIZE + STAMP_SIZE:end + size],
                              self._head[1]))
            elif magic == continued:  # the head's stamp, its sequence plus the distance back to it
                distance = DISTANCE.unpack_from(data, end + HEADER_SIZE)[0]
                head = self._head
                stamp = None
                if head is not None and head[0] == index - distance:
                    stamp = (head[1][0], head[1][1], head[1][2] + distance)
                else:  # stamped once its head is read
                    self._orphans.append((len(records), index - distance))
                append(Record(index, term, pos, "normal", data[end + HEADER_SIZE + DISTANCE_SIZE:end + size], stamp))
            elif magic not in BOOKKEEPING_MAGICS:  # a control entry a reader of data sees
                append(Record(index, term, pos, TYPES.get(magic, "other"), data[end + HEADER_SIZE:end + size]))
            end += size
            self._next = index + 1
        del buffer[:end]
        return records or None

    async def _stamp_orphans(self, records: list[Record]) -> None:
        """Stamp the continuations of a batch whose head came before the stream began: the head's
        stamp, read once (by index, as its headers give it)."""
        for at, head_index in self._orphans:
            if self._head is None or self._head[0] != head_index:
                found = await self.connection.retried("GET", f"/v1/entries/{head_index}",
                                                      headers={"accept": "application/octet-stream"})
                said = found.headers
                self._head = (head_index, (int(said["x-raftlog-producer-id"]), int(said["x-raftlog-producer-epoch"]),
                                           int(said["x-raftlog-sequence"])))
            record = records[at]
            producer_id, epoch, sequence = self._head[1]
            records[at] = record._replace(producer=(producer_id, epoch, sequence + record.index - head_index))
        self._orphans.clear()

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
