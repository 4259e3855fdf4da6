"""Calls to a live member's peer port as a stranger or a hostile member would make them: raw
gRPC (the bytes of each message as given), with or without the cluster secret; the replication
and forwarding streams on h2, as members open them."""

from __future__ import annotations

import asyncio

import grpc
import h2.config
import h2.connection
import h2.events
import h2.settings

from raftlog.api.peer_wire import REPLICATE_PATH, REPLICATE_SETTING, grpc_prefix, take_message

SERVICE = "/raftlog.peer.v1.Peer/"


def _channel(port: int, credentials: grpc.ChannelCredentials | None) -> grpc.Channel:
    target = f"127.0.0.1:{port}"
    return grpc.insecure_channel(target) if credentials is None else grpc.secure_channel(target, credentials)


def _metadata(secret: str | None) -> tuple[tuple[str, str], ...]:
    return () if secret is None else (("authorization", f"Bearer {secret}"),)


def peer_call(port: int, method: str, body: bytes, secret: str | None = None,
              credentials: grpc.ChannelCredentials | None = None) -> bytes:
    """One unary call; a refusal raises grpc.RpcError with its status code."""
    with _channel(port, credentials) as channel:
        answer: bytes = channel.unary_unary(SERVICE + method)(body, timeout=5, metadata=_metadata(secret))
        return answer


class HandWrittenStream:
    """A replication stream written by hand on h2, as a member opens one (its first SETTINGS say so),
    to send what a member never would."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, secret: str | None,
                 path: bytes = REPLICATE_PATH) -> None:
        self.reader, self.writer = reader, writer
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        self.h2.local_settings = h2.settings.Settings(client=True, initial_values={REPLICATE_SETTING: 1})
        self.h2.initiate_connection()
        headers = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", path),
                   (b":authority", b"peer"), (b"content-type", b"application/grpc"), (b"te", b"trailers"),
                   *((k.encode(), v.encode()) for k, v in _metadata(secret))]
        self.h2.send_headers(1, headers)
        self.writer.write(self.h2.data_to_send())

    @classmethod
    async def open(cls, address: str, secret: str | None, path: bytes = REPLICATE_PATH) -> HandWrittenStream:
        host, _, port = address.rpartition(":")
        return cls(*await asyncio.open_connection(host, int(port)), secret, path)

    def send(self, message: bytes) -> None:
        self.send_data(grpc_prefix(len(message)) + message)

    def send_data(self, data: bytes) -> None:
        self.h2.send_data(1, data)
        self.writer.write(self.h2.data_to_send())

    def end(self) -> None:
        self.h2.end_stream(1)
        self.writer.write(self.h2.data_to_send())

    async def outcome(self) -> tuple[list[bytes], grpc.StatusCode | None]:
        """The answers, and the status the stream ended with (None: the connection closed first)."""
        answers, received = [], bytearray()
        try:
            async with asyncio.timeout(10):
                while data := await self.reader.read(65_536):
                    for event in self.h2.receive_data(data):
                        if isinstance(event, h2.events.DataReceived):
                            self.h2.acknowledge_received_data(event.flow_controlled_length, 1)
                            received += event.data
                            while (answer := take_message(received)) is not None:
                                answers.append(answer)
                        elif isinstance(event, h2.events.TrailersReceived | h2.events.ResponseReceived):
                            status = dict(event.headers).get(b"grpc-status")
                            if status is not None:
                                return answers, next(c for c in grpc.StatusCode if c.value[0] == int(status))
                    self.writer.write(self.h2.data_to_send())
            return answers, None
        finally:
            self.writer.close()


def replicate(port: int, pushes: list[bytes], secret: str | None) -> tuple[list[bytes], grpc.StatusCode | None]:
    """Pushes on one replication stream: the answers it gave, and how the stream ended."""
    async def stream() -> tuple[list[bytes], grpc.StatusCode | None]:
        replication = await HandWrittenStream.open(f"127.0.0.1:{port}", secret)
        for push in pushes:
            replication.send(push)
        replication.end()
        return await replication.outcome()

    return asyncio.run(stream())
