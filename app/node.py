"""Node assembly: the store, the checkpoint, the Raft member, cleaning, the peer client,
and the two ASGI apps, started and stopped in the right order.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import grpc
from fastapi import FastAPI

from raftlog.api.answers import DiskStatus
from raftlog.api.auth import AuthFailures
from raftlog.api.consumers import ConsumerCommits
from raftlog.api.entry_handlers import EntryHandlers
from raftlog.api.group_routes import install_group_routes
from raftlog.api.groups import ConsumerGroups
from raftlog.api.grpc_api import GrpcApi
from raftlog.api.grpc_topics import port_service as topics_service
from raftlog.api.limits import InflightBytes
from raftlog.api.metrics import NodeMetrics
from raftlog.api.peer_client import PeerClient
from raftlog.api.peer_server import PeerService
from raftlog.api.public import create_public_app, serve_public
from raftlog.api.queue_reads import QueueReads
from raftlog.api.queue_routes import install_queue_routes
from raftlog.api.service import LogService
from raftlog.api.topic_routes import install_topic_routes
from raftlog.api.topics import TopicService
from raftlog.app.admin import install_admin_page
from raftlog.app.settings import NodeSettings
from raftlog.raft.membership import Configuration, describe_members, saved_configuration
from raftlog.raft.node import RaftNode, trusted_commit_end
from raftlog.storage import Checkpoint, CleanService, CorruptLogError, Store
from raftlog.storage.consume_queues import ConsumeQueues

log = logging.getLogger("raftlog.node")

CHECKPOINT_FILE = "checkpoint.db"
CONSUME_QUEUE_DIR = "consumequeue"  # RocketMQ's store/consumequeue


class Node:
    def __init__(self, settings: NodeSettings, checkpoint: Checkpoint, store: Store,
                 consume_queues: ConsumeQueues | None = None) -> None:
        self.settings = settings
        self.checkpoint = checkpoint
        self.store = store
        saved_committed = checkpoint.state.committed_index  # configurations up to it are in the checkpoint
        state = checkpoint.load(trusted_commit_end(store.config.flush_mode, store))
        config = settings.raft_config()
        secret = settings.secret()
        self.peers = PeerClient(config.self_id, config.peers, rpc_timeout_ms=config.rpc_timeout_ms,
                                push_timeout_ms=config.max_push_timeout_ms,
                                wait_timeout_ms=config.max_wait_ack_ms + config.rpc_timeout_ms,
                                max_message_bytes=settings.peer_message_bytes_max(),
                                max_batch_entries=settings.api_limits().max_batch_entries,
                                secret=secret, tls=settings.peer_tls(), routes=settings.peer_route_map())
        self.raft = RaftNode(config, store, checkpoint, self.peers, term=state.current_term,
                             voted_for=state.voted_for, committed_index=state.committed_index,
                             applied_index=state.applied_index, rejoining=store.recovery.lost_from is not None,
                             configuration=saved_configuration(state.config_index, state.config),
                             config_scan_from=saved_committed + 1, tables=state.saved_tables,
                             consume_queues=consume_queues)
        self.raft.add_config_listener(self.peers.set_members)
        in_force = self.raft.configuration
        if settings.join is None and in_force.index >= 0 and not in_force.same_members(Configuration(config.peers)):
            log.warning("the peers setting (%s) is not the group's configuration (entry %d: %s); the group's is used: "
                        "membership changes through `raftlog members`", settings.peers,
                        in_force.index, describe_members(in_force))
        self.metrics = NodeMetrics(self.raft)
        self._lag_watch: asyncio.Task[None] | None = None
        self.peers.on_push = self.metrics.observe_push
        store.durability.on_flush = self.metrics.flush_seconds.observe
        dispatcher = self.raft.consume_queues
        self.cleaner = CleanService(store, safe_index=self._safe_index, floor=self.raft.consumers.floor,
                                    cleaned=None if dispatcher is None else dispatcher.retained)
        self._flushing_queues: asyncio.Task[None] | None = None
        limits = settings.api_limits()
        self.request_bytes = InflightBytes(limits.max_inflight_body_bytes)  # the client, gRPC and peer ports share it
        self.service = LogService(self.raft, self.peers, limits, client_url=settings.client_url,
                                  grpc_address=settings.grpc_address, describe=self._describe,
                                  remote_members=secret is not None or settings.insecure)
        consumers = ConsumerCommits(self.service)
        self.metrics.watch_consumers(consumers.local)
        self.handlers = EntryHandlers(self.service, self.metrics, consumers)  # REST's routes and the gRPC API's
        self.topics = TopicService(self.service)
        self.groups = ConsumerGroups(self.service, self.topics)
        self.metrics.watch_groups(self.groups.local, self.groups.topic_ends, settings.metrics_queue_lag_series_max)
        self.public_app: FastAPI = create_public_app(self.handlers)  # routes and openapi
        messages = install_topic_routes(self.public_app, self.handlers, self.topics)
        self.queue_reads = QueueReads(self.service, self.topics)  # REST's and gRPC's reads of topic queues
        install_queue_routes(self.public_app, self.handlers, self.queue_reads)
        install_group_routes(self.public_app, self.handlers, self.groups)
        install_admin_page(self.public_app)
        self.public_asgi, self.below_asgi = serve_public(  # what the client port serves
            self.public_app, self.handlers, settings.client_tokens(), budget=self.request_bytes,
            allowed_hosts=settings.client_hosts(), allowed_origins=settings.client_origins(),
            plaintext=settings.client_tls_cert is None, messages=messages)
        self.peer_service = PeerService(self.raft, self.service, secret,  # what the peer port serves
                                        AuthFailures(self.metrics.auth_failures, "peer"), self.request_bytes,
                                        consumers, self.topics, self.groups)
        log.info("%s opened %s: log %d..%d, term %d, committed %d%s", config.self_id, store.data_dir,
                 store.begin_index, store.end_index, state.current_term, state.committed_index,
                 "".join(f"; {note}" for note in store.recovery.notes))

    @classmethod
    async def open(cls, settings: NodeSettings) -> Node:
        """Open the checkpoint and the log and recover them (blocking file work, done once)."""
        data_dir = Path(settings.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        fresh = not (data_dir / "store.json").exists()  # the checkpoint is made before the log
        checkpoint = Checkpoint.open(data_dir / CHECKPOINT_FILE, create=fresh,
                                     interval_ms=settings.checkpoint_interval_ms)
        if settings.join is not None and checkpoint.state.config_index < 0:  # a first start: no configuration yet
            from raftlog.app.join import join_group  # httpx: a node that does not join does not import it

            try:
                joined = await join_group(settings)
                await checkpoint.save_config(joined.index, joined.encode())
            except BaseException:
                await checkpoint.close()
                raise
        committed = checkpoint.state.committed_index
        try:
            try:
                store = Store.open(data_dir, settings.store_config(), committed_index=committed)
            except CorruptLogError as exc:
                if not settings.repair_from_peers:
                    raise
                log.error("%s; cutting the log there and getting the rest from the peers", exc)
                store = Store.open(data_dir, settings.store_config(), committed_index=committed, salvage=True)
        except BaseException:
            await checkpoint.close()
            raise
        try:
            return cls(settings, checkpoint, store, ConsumeQueues(data_dir / CONSUME_QUEUE_DIR))
        except BaseException:
            await checkpoint.close()
            await store.close()
            raise

    def _safe_index(self) -> int:
        """Cleaning never deletes an entry that is not applied yet; a follower that falls behind
        the first kept entry is brought back by a snapshot install (DLedger's rule)."""
        return self.raft.applied_index

    def _describe(self) -> tuple[str, DiskStatus]:
        """The flush mode and the disk, for the cluster status."""
        store = self.store
        return store.config.flush_mode, DiskStatus(str(store.data_dir), round(store.disk_usage_ratio(), 4),
                                                    store.disk_full)

    def grpc_api(self) -> GrpcApi:
        """The public gRPC API's server, bound to its port (OSError or RuntimeError when it cannot)."""
        settings = self.settings
        host, port = settings.grpc_listen
        tls = settings.grpc_credentials()
        credentials = None
        if tls is not None:
            key, chain, ca = tls
            credentials = grpc.ssl_server_credentials([(key, chain)], root_certificates=ca,
                                                      require_client_auth=ca is not None)
        tokens = settings.client_tokens()
        return GrpcApi(self.service, self.handlers, tokens, AuthFailures(self.metrics.auth_failures, "grpc"),
                       f"[{host}]:{port}" if ":" in host else f"{host}:{port}", credentials, self.request_bytes,
                       services=[topics_service(self.topics, self.groups, self.queue_reads, tokens)])

    def start(self) -> None:
        self.store.start()
        self.checkpoint.start()
        self.raft.start()
        self.cleaner.start()
        if self.raft.consume_queues is not None:
            self._flushing_queues = asyncio.create_task(self.raft.consume_queues.run(), name="consume-queues")
        self._lag_watch = asyncio.create_task(self.metrics.watch_loop_lag(), name="loop-lag")

    async def stop(self) -> None:
        """Stop consensus first, then write the last progress and close the files. The checkpoint goes
        before the log: its tables may read the log to take its last committed entries in."""
        if self._lag_watch is not None:
            self._lag_watch.cancel()
        await self.raft.stop()
        await self.cleaner.stop()
        if self._flushing_queues is not None:
            self._flushing_queues.cancel()
            await asyncio.gather(self._flushing_queues, return_exceptions=True)
        if self.raft.consume_queues is not None:
            await self.raft.consume_queues.close()
        await self.peers.close()
        try:
            await self.checkpoint.close()
        finally:
            await self.store.close()
