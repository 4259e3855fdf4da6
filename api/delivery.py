"""The public routes of delivery guarantees: producer sessions (raft.producers), for appends that
happen exactly once however often a producer retries them, and named consumers (raft.consumers,
api.consumers), whose positions the group keeps in its log."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Path, Query, Request
from fastapi.responses import JSONResponse, Response

from raftlog.api.auth import caller_name, caller_of
from raftlog.api.entry_handlers import EntryHandlers, ModelResponse, is_json, not_json, parse_model
from raftlog.api.schemas import (
    CONSISTENCY,
    Consistency,
    ConsumerCommitIn,
    ConsumerList,
    ConsumerOut,
    NewProducer,
    ProducerSession,
)
from raftlog.raft.producers import PRODUCER_ID_MAX


def install_delivery_routes(app: FastAPI, handlers: EntryHandlers,
                            errors: Callable[..., dict[int | str, dict[str, Any]]]) -> None:
    """`errors(*statuses)`: a route's documented error answers."""
    service = handlers.service

    @app.post("/v1/producers", status_code=201, tags=["producers"], summary="Start a producer session",
              responses={201: {"model": ProducerSession, "description": "The id and epoch to append with"},
                         **errors(400, 409, 415)},
              openapi_extra={"requestBody": {"required": False, "content": {"application/json": {
                  "schema": {"$ref": "#/components/schemas/NewProducer"}}}}})
    async def new_producer(request: Request) -> JSONResponse:
        """Send X-Raftlog-Producer-Id, -Producer-Epoch and X-Raftlog-Sequence with each append (sequences
        from 0, each entry the next): a retried append is then answered, not appended again."""
        if not is_json(request) and _has_body(request):  # refused before the body is read
            raise not_json(request)
        data = await handlers.read_small_body(request)
        asked = parse_model(NewProducer, data if data else b"{}")
        return ModelResponse(ProducerSession.of(await service.new_producer(asked.id, caller_name(request.scope))),
                             status_code=201)

    @app.delete("/v1/producers/{producer_id}", tags=["producers"], summary="Close a producer session",
                responses={200: {"model": ProducerSession, "description": "Closed: its id takes no more batches"},
                           **errors(400, 403, 409, 502, 503, 504)})
    async def close_producer(request: Request, producer_id: int = Path(ge=0, le=PRODUCER_ID_MAX)) -> JSONResponse:
        """Only its owner (the caller that opened it) may close it; a producer closes its session when
        it is done, so that it does not count against producer_sessions_per_name_max until it expires."""
        return ModelResponse(ProducerSession.of(await service.change_session(producer_id, caller_name(request.scope),
                                                                              close=True)))

    name_path = Path(examples=["billing"], description="1 to 128 letters, digits, '.', '_' or '-'")

    @app.put("/v1/consumers/{name}", tags=["consumers"], summary="Commit a consumer's position",
             responses={200: {"model": ConsumerOut, "description": "Committed (in the log, through the leader)"},
                        **errors(400, 403, 409, 413, 415, 502, 503, 504, 507)})
    async def commit_consumer(request: Request, name: str = name_path) -> JSONResponse:
        """Readers that pass `consumer=NAME` resume at the entry after the position. A consumer that
        commits nothing in consumer_idle_entries entries expires. Needs the writer role, or a consumer
        token whose name is the consumer's, or its name's start before a dot (`billing` moves `billing`
        and `billing.eu`); `retention_floor` needs the admin role."""
        asked = await handlers.read_json(request, ConsumerCommitIn)
        answer = await handlers.consumers.commit(name, asked.position, asked.metadata, asked.expected,
                                                 caller=caller_of(request.scope), floor=asked.retention_floor)
        return ModelResponse(ConsumerOut.of(answer))

    @app.get("/v1/consumers/{name}", tags=["consumers"], summary="A consumer's committed position",
             responses={200: {"model": ConsumerOut, "description": "Its position, and its lag on this member"},
                        **errors(400, 404, 502, 503, 504)})
    async def get_consumer(name: str = name_path, consistency: Consistency = CONSISTENCY) -> JSONResponse:
        return ModelResponse(ConsumerOut.of(await handlers.consumers.get(name, consistency == "linearizable")))

    @app.get("/v1/consumers", tags=["consumers"], summary="Every consumer's committed position",
             responses={200: {"model": ConsumerList, "description": "By name"}, **errors(400, 502, 503, 504)})
    async def list_consumers(consistency: Consistency = CONSISTENCY) -> JSONResponse:
        answers = await handlers.consumers.list_all(consistency == "linearizable")
        return ModelResponse(ConsumerList(consumers=[ConsumerOut.of(a) for a in answers]))

    @app.delete("/v1/consumers/{name}", status_code=204, tags=["consumers"], summary="Remove a consumer",
                responses={204: {"description": "Removed (in the log, through the leader)"},
                           **errors(400, 403, 404, 409, 502, 503, 504, 507)})
    async def delete_consumer(request: Request, name: str = name_path, expected: int | None = Query(
            None, ge=0, description="A compare-and-set: the position the consumer must be at")) -> Response:
        """Needs the role a commit of the consumer needs."""
        await handlers.consumers.delete(name, expected, caller=caller_of(request.scope))
        return Response(status_code=204)


def _has_body(request: Request) -> bool:
    """Whether the request's headers announce a body (one without Content-Length or chunked has none)."""
    for name, value in request.scope["headers"]:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False
