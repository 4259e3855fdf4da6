"""grpc.health.v1 for the public gRPC API (api.grpc_api), as /healthz and /readyz are for REST."""

from __future__ import annotations

import asyncio
from typing import Any

from grpc_health.v1 import health_pb2
from grpc_health.v1.health import aio as health_aio

from raftlog.api.service import LogService

READINESS_S = 1.0  # how often Watch subscribers of the API's service get readiness anew


class Readiness(health_aio.HealthServicer):
    """grpc.health.v1: the empty service is SERVING while the process is up; the API's services
    (`raftlog.v1.Log`, `raftlog.v1.Topics`) while the member has a leader and has caught up with it
    (as /readyz), asked at each Check."""

    def __init__(self, service: LogService, *names: str) -> None:
        super().__init__()
        self.service = service
        self.names = names  # the API's services

    async def refresh(self) -> None:
        ready = self.service.node.caught_up
        for name in self.names:
            await self.set(name, health_pb2.HealthCheckResponse.SERVING if ready
                           else health_pb2.HealthCheckResponse.NOT_SERVING)

    async def Check(self, request: health_pb2.HealthCheckRequest, context: Any) -> Any:
        if request.service in self.names:
            await self.refresh()
        return await super().Check(request, context)

    async def watch_loop(self) -> None:
        """Watch subscribers learn a change within READINESS_S."""
        while True:
            await self.refresh()
            await asyncio.sleep(READINESS_S)
