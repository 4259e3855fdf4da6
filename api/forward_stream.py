"""A follower's appends to its leader, many clients' in one message, on one long-lived stream.

Each append a follower takes used to be a unary call of its own to the leader: a tenth of the
leader's rate, at several times its latency, when clients behind a load balancer write to any
member. The forwarding stream batches them as the leader batches its pushes: the appends that
arrive while FORWARDS_AHEAD_MAX messages are on their way (or in the same turn of the event loop)
go together as the next message, one `AppendRequest` of all their bodies, to the leader's
`Forward` method (api.stream_server serves it). The leader appends each message as one batch
and answers in order; each client gets its own slice of the answer: its first index, its
positions. A message holds at most `max_entries` entries and `max_bytes` of bodies, the limits of
one forwarded batch. A producer's batch goes alone, in a message that names the producer
(raft.producers checks its sequence against the session as one batch), after those before it.

A stream that breaks fails every append on it (api.peer_client says NETWORK_ERROR: the leader may
have appended them); the next append opens another stream.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence

from google.protobuf.message import DecodeError

from raftlog.api import peer_pb2 as pb
from raftlog.api.peer_codec import PeerMessageError, append_request
from raftlog.api.peer_stream import H2CallStream, StreamOwner
from raftlog.api.peer_wire import FORWARD_PATH
from raftlog.raft.producers import Sequenced
from raftlog.raft.transport import fail_push

FORWARDS_AHEAD_MAX = 2  # messages on their way to the leader; the appends that come meanwhile wait to go together
ANSWER_OVERHEAD_BYTES = 4096  # an answer's fields around its positions (an error's message included)
POSITION_BYTES_MAX = 10  # a varint of a position


Slice = tuple[pb.AppendResponse, int, int]  # the leader's answer to a message, and where in it one append is


class ForwardStream(H2CallStream):
    path, method = FORWARD_PATH, "Forward"

    def __init__(self, client: StreamOwner, peer_id: str, address: str, tls: ssl.SSLContext | None, *,
                 max_entries: int, max_bytes: int) -> None:
        super().__init__(client, peer_id, address, tls, timeout_s=client.wait_timeout_s,
                         answer_bytes_max=ANSWER_OVERHEAD_BYTES + POSITION_BYTES_MAX * max_entries)
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._bodies: list[bytes] = []  # the next message's
        self._bytes = 0
        self._appends: list[tuple[asyncio.Future[Slice], int]] = []  # (answer, entries) of each, in order
        self._ahead = 0  # messages sent and not answered
        self._soon: asyncio.Handle | None = None

    def append(self, bodies: Sequence[bytes], producer: Sequenced | None = None,
               caller: str = "") -> asyncio.Future[Slice]:
        """Send `bodies` with the appends around them (a producer's alone, with its caller, who must own
        its session); the leader's answer and
        where in it they are: (answer, offset, count). The batch fits one message alone (the caller
        checked it)."""
        answer: asyncio.Future[Slice] = self._loop.create_future()
        if self.broken:
            fail_push(answer, f"{self.peer_id} {self.method}: the stream is broken")
            return answer
        if producer is not None:
            self._send()  # the appends before it go first
            self._appends.append((answer, len(bodies)))
            self._ship(append_request(bodies, producer, caller))
            return answer
        size = sum(map(len, bodies))
        if self._bodies and (len(self._bodies) + len(bodies) > self.max_entries or self._bytes + size > self.max_bytes):
            self._send()
        self._appends.append((answer, len(bodies)))
        self._bodies.extend(bodies)
        self._bytes += size
        if self._ahead < FORWARDS_AHEAD_MAX and self._soon is None:
            self._soon = self._loop.call_soon(self._send)  # the appends of this turn go together
        return answer

    def close(self, reason: str = "closed") -> None:
        if self._soon is not None:
            self._soon.cancel()
            self._soon = None
        for answer, _entries in self._appends:
            fail_push(answer, f"{self.peer_id} {self.method}: {reason}")
        self._appends, self._bodies, self._bytes = [], [], 0
        super().close(reason)

    def _send(self) -> None:
        if self._soon is not None:
            self._soon.cancel()
            self._soon = None
        if not self._appends or self.broken:
            return
        self._ship(append_request(self._bodies, None))

    def _ship(self, message: bytes) -> None:
        """Send `message`, the waiting appends' own."""
        appends = self._appends
        self._appends, self._bodies, self._bytes = [], [], 0
        self._ahead += 1
        self._put(message, len(message)).add_done_callback(lambda sent: self._split(sent, appends))

    def _decode(self, answer: bytes) -> pb.AppendResponse:
        try:
            return pb.AppendResponse.FromString(answer)
        except DecodeError as exc:
            raise PeerMessageError(f"an answer that does not decode: {exc}") from None

    def _split(self, sent: asyncio.Future[pb.AppendResponse], appends: list[tuple[asyncio.Future[Slice], int]]
                  ) -> None:
        """Each append's slice of the leader's answer; the next message goes if appends wait for it."""
        self._ahead -= 1
        failure = None if sent.cancelled() else sent.exception()
        offset = 0
        for answer, entries in appends:
            if answer.done():
                pass
            elif failure is not None or sent.cancelled():
                fail_push(answer, str(failure or "cancelled"))
            else:
                answer.set_result((sent.result(), offset, entries))
            offset += entries
        if self._appends and self._soon is None:
            self._send()
