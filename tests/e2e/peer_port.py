"""Calls to a live member's peer port as a stranger or a hostile member would make them: raw
gRPC (the bytes of each message as given), with or without the cluster secret."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import grpc

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


def replicate(port: int, pushes: list[bytes], secret: str | None) -> tuple[list[bytes], grpc.StatusCode]:
    """Pushes on one replication stream: the answers it gave, and how the stream ended."""
    def requests() -> Iterator[bytes]:
        yield from pushes

    answers: list[bytes] = []
    with _channel(port, None) as channel:
        call = channel.stream_stream(SERVICE + "Replicate")(requests(), timeout=10, metadata=_metadata(secret))
        with contextlib.suppress(grpc.RpcError):  # the stream's end is its code
            answers.extend(call)
        return answers, call.code()
