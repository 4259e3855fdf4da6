"""The public routes of topics (api.topics): the catalog (changed by admins, read by readers) and
appends of messages, through any member."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Path, Request
from fastapi.responses import JSONResponse, Response

from raftlog.api.answers import MessageAnswer
from raftlog.api.auth import caller_name, caller_of
from raftlog.api.entry_handlers import (
    EntryHandlers,
    ModelResponse,
    check_json_values,
    decode_body,
    is_json,
    not_json,
    parse_model,
    producer_of,
)
from raftlog.api.errors import ApiError, too_large
from raftlog.api.public import ERROR_TEXT, PRODUCER_PARAMETERS
from raftlog.api.schemas import CONSISTENCY, Consistency, ErrorBody
from raftlog.api.topic_schemas import (
    TOPIC_NAME,
    TOPIC_NAME_TEXT,
    MessagesAppended,
    NewMessages,
    NewTopic,
    TopicList,
    TopicOut,
    TopicPatch,
    messages_json,
)
from raftlog.api.topics import KEYS_MAX, PROPERTIES_MAX, TAGS_MAX, TopicService
from raftlog.storage.message import Meta

# A message's JSON holds at most this many times what an entry's does (check_json_values' unit: 3
# objects, arrays or commas and 4 strings): its five fields, and its keys, tags and properties at their most
VALUES_PER_MESSAGE = max(-(-(10 + KEYS_MAX + TAGS_MAX + PROPERTIES_MAX) // 3),
                         -(-(7 + KEYS_MAX + TAGS_MAX + 2 * PROPERTIES_MAX) // 4)) + 1


# What the topic routes' statuses mean beside what every route's do (api.public.ERROR_TEXT)
TOPIC_ERRORS = {
    400: "Bad input: malformed JSON, a wrong encoding, an empty batch or body, a bad parameter; INVALID_TOPIC (a "
         "name, queue count or size the catalog cannot take, or a queue count that would shrink); "
         "KEYS_IN_SEVERAL_QUEUES (a batch whose keys fall in several queues, without split)",
    403: "PERMISSION_DENIED: the token's role may not call this route (the catalog: admin; messages: writer); "
         "TOPIC_NOT_WRITABLE: the topic takes no messages (drained); NOT_PRODUCER_OWNER: another caller's producer "
         "session; ORIGIN_NOT_ALLOWED: a state-changing request from a page of another origin",
    404: "TOPIC_NOT_FOUND: no topic of this name, or no such queue in it",
    409: "TOPIC_EXISTS, TOPICS_FULL (topics_max), CLUSTER_VERSION_TOO_LOW (a member holds the group below topics' "
         "version); a producer's batch refused: OUT_OF_ORDER_SEQUENCE, PRODUCER_FENCED, UNKNOWN_PRODUCER",
    413: "A message over its topic's max_message_bytes (MESSAGE_TOO_LARGE) or, with its keys, tags and properties, "
         "over max_entry_bytes; a request over max_request_bytes (small ones: small_request_bytes_max)",
}


def errors(*statuses: int, texts: Mapping[int, str] = TOPIC_ERRORS) -> dict[int | str, dict[str, Any]]:
    """The error answers of a topic route (`texts`: of another route, beside what every route's mean),
    500 included."""
    return {status: {"model": ErrorBody, "description": texts.get(status, ERROR_TEXT[status])}
            for status in sorted({*statuses, 500})}


def install_topic_routes(app: FastAPI, handlers: EntryHandlers, topics: TopicService) -> MessageAppends:
    """The routes of the catalog and of appends; returns what answers appends, which the fast path shares."""
    appends = MessageAppends(handlers, topics)
    name_path = Path(max_length=127, pattern=TOPIC_NAME, examples=["orders"], description=TOPIC_NAME_TEXT)

    @app.post("/v1/topics", status_code=201, tags=["topics"], summary="Create a topic",
              responses={201: {"model": TopicOut, "description": "Created (in the log, through the leader)"},
                         **errors(400, 403, 404, 409, 413, 415, 502, 503, 504, 507)},
              openapi_extra=json_body(NewTopic))
    async def create_topic(request: Request) -> JSONResponse:
        """Needs the admin role. Its id is the index of the entry that created it."""
        asked = await handlers.read_json(request, NewTopic)
        topic = await topics.changed("create", asked.name, asked.fields(), caller=caller_of(request.scope))
        return ModelResponse(TopicOut.of(topic), status_code=201)

    @app.get("/v1/topics", tags=["topics"], summary="Every topic",
             responses={200: {"model": TopicList, "description": "By name"}, **errors(400, 502, 503, 504)})
    async def list_topics(consistency: Consistency = CONSISTENCY) -> JSONResponse:
        listed = await topics.list_all(consistency == "linearizable")
        return ModelResponse(TopicList(topics=[TopicOut.of(topic) for topic in listed]))

    @app.get("/v1/topics/{name}", tags=["topics"], summary="One topic",
             responses={200: {"model": TopicOut, "description": "The topic"}, **errors(400, 404, 502, 503, 504)})
    async def get_topic(name: str = name_path, consistency: Consistency = CONSISTENCY) -> JSONResponse:
        return ModelResponse(TopicOut.of(await topics.get(name, consistency == "linearizable")))

    @app.patch("/v1/topics/{name}", tags=["topics"], summary="Change a topic",
               responses={200: {"model": TopicOut, "description": "Changed (in the log, through the leader)"},
                          **errors(400, 403, 404, 409, 413, 415, 502, 503, 504, 507)},
               openapi_extra=json_body(TopicPatch))
    async def change_topic(request: Request, name: str = name_path) -> JSONResponse:
        """Needs the admin role. A queue count grows, never shrinks; `writable: false` drains the topic."""
        fields = (await handlers.read_json(request, TopicPatch)).fields()
        return ModelResponse(TopicOut.of(await topics.changed("change", name, fields, caller=caller_of(request.scope))))

    @app.delete("/v1/topics/{name}", status_code=204, tags=["topics"], summary="Delete a topic",
                responses={204: {"description": "Deleted (in the log, through the leader)"},
                           **errors(400, 403, 404, 409, 502, 503, 504, 507)})
    async def delete_topic(request: Request, name: str = name_path) -> Response:
        """Needs the admin role. Its messages leave the log with retention; a topic created again by
        the same name has another id, and none of them."""
        await topics.change("delete", name, {}, caller=caller_of(request.scope))
        return Response(status_code=204)

    @app.post("/v1/topics/{name}/messages", status_code=201, tags=["topics"], summary="Append messages to a topic",
              responses={201: {"model": MessagesAppended, "description": "All committed, each at its queue offset"},
                         207: {"model": MessagesAppended, "description": "A split batch of which some parts were "
                               "committed: each message has its place or its part's error"},
                         **errors(400, 403, 404, 409, 413, 415, 502, 503, 504, 507)},
              openapi_extra={**json_body(NewMessages), "parameters": PRODUCER_PARAMETERS})
    async def append_messages(request: Request, name: str = name_path) -> Response:
        """Needs the writer role. A batch goes to one queue, all or nothing: the one named, else its
        keys' queue (crc32(first key) % queues), else the member's turn; a drained topic answers 403
        TOPIC_NOT_WRITABLE. A producer's batch (its session's headers) numbers its messages in their
        queue: a retry is answered, not appended."""
        return await appends(request, name)

    return appends


class MessageAppends:
    """POST /v1/topics/{name}/messages, answered one way: by its FastAPI route, which openapi.yaml
    documents, and below ASGI by the fast path (api.fast_path), as appends of entries are."""

    def __init__(self, handlers: EntryHandlers, topics: TopicService) -> None:
        self.handlers = handlers
        self.topics = topics

    async def __call__(self, request: Request, name: str) -> Response:
        if not is_json(request):  # refused before the body is read
            raise not_json(request)
        handlers = self.handlers
        data = await handlers.read_body(request)
        try:
            check_json_values(data, handlers.limits.max_batch_entries * VALUES_PER_MESSAGE)
        except ApiError:
            raise too_large(f"the batch holds more values than {handlers.limits.max_batch_entries} messages can "
                            "(max_batch_entries)") from None
        asked = parse_model(NewMessages, data)
        if len(asked.messages) > 1:
            await asyncio.sleep(0)  # a large batch's steps each leave the loop to the heartbeats between them
        bodies = [decode_body(message) for message in asked.messages]
        metas = [Meta(tuple(message.keys), tuple(message.tags), tuple(message.properties.items()))
                 for message in asked.messages]
        results = await self.topics.append(name, bodies, metas, queue=asked.queue, split=asked.split,
                                           caller=caller_name(request.scope), producer=producer_of(request))
        committed = all(isinstance(result, MessageAnswer) for result in results)
        return JSONResponse(messages_json(results), status_code=201 if committed else 207)


def json_body(model: type[Any]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}}
