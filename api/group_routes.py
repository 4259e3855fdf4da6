"""The public routes of consumer groups (api.groups): a group's offsets per queue, committed through
any member and read with each queue's lag."""

from __future__ import annotations

from fastapi import FastAPI, Path, Request
from fastapi.responses import JSONResponse, Response

from raftlog.api.auth import caller_of
from raftlog.api.entry_handlers import EntryHandlers, ModelResponse
from raftlog.api.group_schemas import GroupCommitIn, GroupCommittedOut, GroupList, GroupOut, GroupSummary
from raftlog.api.groups import ConsumerGroups, QueueCommit
from raftlog.api.schemas import CONSISTENCY, Consistency
from raftlog.api.topic_routes import errors, json_body

# What the group routes' statuses mean beside what every route's do (api.public.ERROR_TEXT)
GROUP_ERRORS = {
    400: "Bad input: malformed JSON, a bad group name, a queue named twice, an offset below -1",
    403: "PERMISSION_DENIED: moving a group needs the writer role, or a consumer token whose name is the group's "
         "(or its start before a dot); ORIGIN_NOT_ALLOWED: a state-changing request from a page of another origin",
    404: "TOPIC_NOT_FOUND: no topic of this name, or no such queue in it; CONSUMER_NOT_FOUND: no group of this "
         "name (or it expired)",
    409: "CONSUMER_CONFLICT: an expected offset is not the group's (the message names the queue and what it found; "
         "no queue moved); CONSUMER_POSITION_PAST_END: an offset past its queue's end; CONSUMERS_FULL: "
         "consumers_max groups; CLUSTER_VERSION_TOO_LOW: a member holds the group below topics' version",
    413: "A commit of more queues than one entry holds (max_entry_bytes), or a body over small_request_bytes_max",
}


def install_group_routes(app: FastAPI, handlers: EntryHandlers, groups: ConsumerGroups) -> None:
    group_path = Path(examples=["billing"], description="1 to 128 letters, digits, '.', '_' or '-'")

    @app.post("/v1/groups/{group}/offsets", tags=["groups"], summary="Commit a consumer group's offsets",
              responses={200: {"model": GroupCommittedOut, "description": "Committed (one entry, through the "
                                                                          "leader)"},
                         **errors(400, 403, 404, 409, 413, 415, 502, 503, 504, 507, texts=GROUP_ERRORS)},
              openapi_extra=json_body(GroupCommitIn))
    async def commit_offsets(request: Request, group: str = group_path) -> JSONResponse:
        """One entry holds the offsets of all the queues named, each the next offset the group reads
        there. A group that commits nothing in consumer_idle_entries entries expires. Needs the writer
        role, or a consumer token whose name is the group's, or its name's start before a dot."""
        asked = await handlers.read_json(request, GroupCommitIn)
        queues = [QueueCommit(q.queue, q.offset, q.expected) for q in asked.queues]
        committed = await groups.commit(group, asked.topic, queues, caller=caller_of(request.scope))
        return ModelResponse(GroupCommittedOut.of(committed, asked.topic))

    @app.get("/v1/groups", tags=["groups"], summary="Every consumer group",
             responses={200: {"model": GroupList, "description": "By name, each with its lag"},
                        **errors(400, 502, 503, 504, texts=GROUP_ERRORS)})
    async def list_groups(consistency: Consistency = CONSISTENCY) -> JSONResponse:
        listed = await groups.list_all(consistency == "linearizable")
        return ModelResponse(GroupList(groups=[GroupSummary.of(group) for group in listed]))

    @app.get("/v1/groups/{group}", tags=["groups"], summary="A consumer group's offsets and lag per queue",
             responses={200: {"model": GroupOut, "description": "Per topic and queue, on the answering member"},
                        **errors(400, 404, 502, 503, 504, texts=GROUP_ERRORS)})
    async def get_group(group: str = group_path, consistency: Consistency = CONSISTENCY) -> JSONResponse:
        return ModelResponse(GroupOut.of(await groups.get(group, consistency == "linearizable")))

    @app.delete("/v1/groups/{group}", status_code=204, tags=["groups"], summary="Remove a consumer group",
                responses={204: {"description": "Removed with its offsets (in the log, through the leader)"},
                           **errors(400, 403, 404, 409, 502, 503, 504, 507, texts=GROUP_ERRORS)})
    async def delete_group(request: Request, group: str = group_path) -> Response:
        """Needs the role a commit of the group needs."""
        await groups.delete(group, caller=caller_of(request.scope))
        return Response(status_code=204)
