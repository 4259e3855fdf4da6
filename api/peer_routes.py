"""Internal routes under /raft/, served on the peer port over HTTP/2 cleartext.

Raft's calls (vote, heartbeat, push, transfer) go to the node as typed
messages; the others serve a member's public API (forwarded appends, read
index, leadership transfer, status). Every route reads its whole request body
(an unread DATA frame on a finished stream can make hypercorn drop the
connection). An undecodable message answers 400; an error of a served call
answers PEER_ERROR_STATUS with the public error shape.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response

from api.bodies import BatchFormatError, decode_bodies
from api.errors import ApiError, bad_request
from api.peer_client import PEER_ERROR_STATUS, peer_error_body
from api.peer_codec import PeerMessageError, decode_message, decode_push, encode_message
from api.public import ENTRIES_CONTENT_TYPE
from api.service import LogService
from raft.messages import Code, FetchRequest, HeartbeatRequest, TransferRequest, VoteRequest
from raft.node import RaftNode

JSON = "application/json"


def create_peer_app(node: RaftNode, service: LogService) -> FastAPI:
    app = FastAPI(title="raftlog peer routes", openapi_url=None, docs_url=None, redoc_url=None)

    def route(path: str, method: str = "POST", media_type: str = JSON) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            async def endpoint(request: Request) -> Response:
                body = await request.body()
                try:
                    return Response(await handler(body), media_type=media_type)
                except (PeerMessageError, BatchFormatError) as exc:
                    return Response(json.dumps({"error": str(exc)}), status_code=400, media_type=JSON)
                except ApiError as exc:
                    return Response(json.dumps(peer_error_body(exc)), status_code=PEER_ERROR_STATUS,
                                    media_type=JSON)

            app.add_api_route(path, endpoint, methods=[method])
            return handler
        return register

    @route("/raft/vote")
    async def vote(body: bytes) -> bytes:
        return encode_message(await node.handle_vote(decode_message(VoteRequest, body)))

    @route("/raft/heartbeat")
    async def heartbeat(body: bytes) -> bytes:
        return encode_message(await node.handle_heartbeat(decode_message(HeartbeatRequest, body)))

    @route("/raft/push")
    async def push(body: bytes) -> bytes:
        return encode_message(await node.handle_push(decode_push(body)))

    @route("/raft/transfer")
    async def transfer(body: bytes) -> bytes:
        return encode_message(await node.handle_transfer(decode_message(TransferRequest, body)))

    @route("/raft/fetch", media_type=ENTRIES_CONTENT_TYPE)
    async def fetch(body: bytes) -> bytes:
        return await node.handle_fetch(decode_message(FetchRequest, body))

    @route("/raft/append")
    async def append(body: bytes) -> bytes:
        bodies = decode_bodies(body)
        service.check_bodies(bodies)
        return _json(await service.append_here(bodies))

    @route("/raft/read_index", "GET")
    async def read_index(body: bytes) -> bytes:
        if not node.state.is_leader:  # never forwarded twice
            raise ApiError(Code.NOT_LEADER, "this member is not the leader", node.leader_id)
        return _json({"committed_index": await service.read_index()})

    @route("/raft/leader")
    async def leader(body: bytes) -> bytes:
        try:
            target = json.loads(body)["target"]
        except (ValueError, KeyError, TypeError):
            raise bad_request('expected {"target": "<member id>"}') from None
        if not node.state.is_leader:
            raise ApiError(Code.NOT_LEADER, "this member is not the leader", node.leader_id)
        return _json(await service.transfer_leadership(target))

    @route("/raft/status", "GET")
    async def status(body: bytes) -> bytes:
        return _json(service.own_status())

    return app


Handler = Callable[[bytes], Awaitable[bytes]]


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()
