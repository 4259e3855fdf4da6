"""The public routes of delivery guarantees: producer sessions (raft.producers), for appends that
happen exactly once however often a producer retries them."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from raftlog.api.entry_handlers import EntryHandlers, ModelResponse, is_json, parse_model
from raftlog.api.errors import ApiError
from raftlog.api.schemas import NewProducer, ProducerSession
from raftlog.raft.messages import Code


def install_delivery_routes(app: FastAPI, handlers: EntryHandlers, errors: dict[int | str, dict[str, object]]
                            ) -> None:
    service = handlers.service

    @app.post("/v1/producers", status_code=201, tags=["producers"], summary="Start a producer session",
              responses={201: {"model": ProducerSession, "description": "The id and epoch to append with"},
                         **errors},
              openapi_extra={"requestBody": {"required": False, "content": {"application/json": {
                  "schema": {"$ref": "#/components/schemas/NewProducer"}}}}})
    async def new_producer(request: Request) -> JSONResponse:
        """Send X-Raftlog-Producer-Id, -Producer-Epoch and X-Raftlog-Sequence with each append (sequences
        from 0, each entry the next): a retried append is then answered, not appended again."""
        data = await handlers.read_body(request)
        if data and not is_json(request):
            raise ApiError(Code.UNEXPECTED_ARGUMENT, f"{request.url.path} takes application/json", status=415)
        asked = parse_model(NewProducer, data if data else b"{}")
        return ModelResponse(ProducerSession.of(service.new_producer(asked.id)), status_code=201)
