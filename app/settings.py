"""Node settings: flags > environment (RAFTLOG_...) > TOML file > defaults.

The node's own settings are declared here; the DLedger-derived ones are taken
field by field from the layers that own them (raft.RaftConfig,
storage.StoreConfig, api.ApiLimits), so each default lives in one place and
docs/operations.md's settings tables document them. `Settings.build()` validates them
all together and raises SettingsError with one line that says what is wrong.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import ssl
from pathlib import Path
from typing import Any, Literal, get_type_hints
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, create_model
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from raftlog.api.auth import TOKEN_CHARS_MIN, TokenError, Tokens, is_credential, is_loopback
from raftlog.api.browser import LOOPBACK_NAMES, host_name
from raftlog.api.limits import ApiLimits
from raftlog.api.peer_client import PeerTls
from raftlog.raft.config import RaftConfig, parse_peers, parse_routes
from raftlog.storage.codec import HEADER_SIZE, STAMP_SIZE
from raftlog.storage.config import StoreConfig

NOT_SETTINGS = {"self_id", "peers", "preferred_leader_ids"}
REMOVED = {  # settings of earlier releases, and what took their place: named where an old file still sets one
    "consumer_retention_floor": "retention's floor is now a flag of each named consumer, which an admin sets "
                                "(PUT /v1/consumers/{name} with retention_floor true; docs/api.md, Named consumers)",
}


class SettingsError(Exception):
    """A setting that stops the node from starting; the message is one line for the operator."""


class NodeSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RAFTLOG_", extra="forbid")

    id: str = "n1"  # this member's id, one of the ids in `peers`
    peers: str = "n1-127.0.0.1:9001"  # DLedger's peers string: id-host:peer_port;...; suffix @learner
    data_dir: Path = Path("data/n1")  # this member's log files and checkpoint
    client_host: str = "127.0.0.1"  # the public API listens here
    client_port: int = 8001
    peer_host: str | None = None  # the peer port listens here (default: the host in this member's peer address)
    advertise_client_url: str | None = None  # how clients reach this member (default: from client_host/port)
    grpc_port: int = 7001  # the public gRPC API (raftlog.v1.Log) listens here
    grpc_host: str | None = None  # ... on this host (default: client_host); TLS and tokens as the client port's
    advertise_grpc_address: str | None = None  # how gRPC clients reach this member, host:port (default: from above)
    preferred_leaders: str = ""  # DLedger's preferredLeaderIds, ';'-separated
    # id-host:port;...: where this member reaches these peers, over the address the group's configuration
    # gives (members that see each other at other addresses: NAT, a proxy; the fault suite's per-link proxies)
    peer_routes: str = ""
    # a member's client URL: on its first start (no configuration in its checkpoint) this member asks the group
    # to add it as a learner, and starts from the configuration the group answers; `peers` names only itself
    join: str | None = None
    join_token: SecretStr | None = None  # an admin token for the join, where the group has tokens
    join_ca: Path | None = None  # the CA that signs the group's client certificates (default: peer_tls_ca)
    checkpoint_interval_ms: int = 3000  # how often committed/applied indices are written to SQLite
    # /metrics: a consumer group's lag in one queue has a series for the most lagging queues only, this many
    # (and for the queues a scrape asks for): 80,000 queues must not make 80,000 series
    metrics_queue_lag_series_max: int = Field(20, ge=0)
    # a committed entry found damaged or missing on open: cut it away and get it again from the peers (the
    # member neither votes nor stands until it has); false: refuse to start, for an operator to decide
    repair_from_peers: bool = True
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["text", "json"] = "text"  # json: one object per line, for log shippers
    # security (docs/operations.md, Security): off only when every listener and peer is on loopback
    cluster_secret: SecretStr | None = None  # proof of membership on every peer call; same on every member
    cluster_secret_file: Path | None = None  # ... or read from this file
    tokens: SecretStr | None = None  # client tokens, role:name:token, comma-separated (docs/operations.md)
    tokens_file: Path | None = None  # ... or one role:token per line in this file
    insecure: bool = False  # start without a secret or tokens on non-loopback addresses
    # the host names the client port answers to on plaintext (Host header; `*`: any), comma-separated, beside
    # the loopback names, client_host and the host of advertise_client_url: against DNS rebinding
    allowed_hosts: str = ""
    allowed_origins: str = ""  # web origins beside the member's own that may change state: https://ops.example
    # the proxies whose X-Forwarded-For and X-Forwarded-Proto the client port believes (addresses or networks,
    # comma-separated); from anyone else, and by default from everyone, the client and scheme are the connection's
    trusted_proxies: str = ""
    client_tls_cert: Path | None = None  # HTTPS on the client port: certificate chain (PEM)
    client_tls_key: Path | None = None  # ... and its private key
    client_tls_ca: Path | None = None  # ... and, to require client certificates, the CA that signs them
    peer_tls_cert: Path | None = None  # mutual TLS on the peer port: this member's certificate (PEM)
    peer_tls_key: Path | None = None  # ... its private key
    peer_tls_ca: Path | None = None  # ... and the CA that signs every member's certificate

    toml_file: Path | None = None  # where the TOML settings came from, if anywhere

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings],
                                   init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml = settings_cls.model_config.get("toml_file")
        sources = [init_settings, env_settings]
        if toml:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml))
        return tuple(sources)

    # -- the layers' configurations ------------------------------------------------------

    def raft_config(self) -> RaftConfig:
        preferred = tuple(filter(None, (p.strip() for p in self.preferred_leaders.split(";"))))
        return RaftConfig(self_id=self.id, peers=parse_peers(self.peers), preferred_leader_ids=preferred,
                          **self._values_of(RaftConfig))

    def peer_route_map(self) -> dict[str, str]:
        return {p.id: p.address for p in parse_routes(self.peer_routes)}

    def store_config(self) -> StoreConfig:
        return StoreConfig(**self._values_of(StoreConfig))

    def api_limits(self) -> ApiLimits:
        return ApiLimits(**self._values_of(ApiLimits))

    def peer_message_bytes_max(self) -> int:
        """The largest message on the peer port: a push (push_bytes_max, or one entry larger than
        that), or a forwarded append (max_request_bytes), with room for the fields around them."""
        limits = self.api_limits()
        return max(self.raft_config().push_bytes_max, limits.max_entry_bytes + HEADER_SIZE,
                   limits.max_request_bytes) + (1 << 20)

    def _values_of(self, cls: type) -> dict[str, Any]:
        names = {f.name for f in dataclasses.fields(cls)} - NOT_SETTINGS
        return {name: getattr(self, name) for name in names}

    @property
    def peer_address(self) -> tuple[str, int]:
        """Where this member's peer port listens."""
        host, _, port = self.advertised_peer_address.rpartition(":")
        return self.peer_host or host, int(port)

    @property
    def advertised_peer_address(self) -> str:
        """How the other members reach this one's peer port: its address in `peers`."""
        return next(p.address for p in parse_peers(self.peers) if p.id == self.id)

    @property
    def client_url(self) -> str:
        if self.advertise_client_url:
            return self.advertise_client_url.rstrip("/")
        host = self.client_host
        if host in ("0.0.0.0", "::", ""):
            host = self.peer_address[0] if self.peer_host is None else "127.0.0.1"
        return f"{'https' if self.client_tls_cert else 'http'}://{host}:{self.client_port}"

    @property
    def grpc_listen(self) -> tuple[str, int]:
        """Where the gRPC API listens."""
        return (self.client_host if self.grpc_host is None else self.grpc_host), self.grpc_port

    @property
    def grpc_address(self) -> str:
        """How gRPC clients reach this member: host:port, as grpcurl and channels take it."""
        if self.advertise_grpc_address:
            return self.advertise_grpc_address
        host = self.grpc_listen[0]
        if host in ("0.0.0.0", "::", ""):
            host = self.peer_address[0] if self.peer_host is None else "127.0.0.1"
        return f"[{host}]:{self.grpc_port}" if ":" in host else f"{host}:{self.grpc_port}"

    # -- security --------------------------------------------------------------------------

    def client_hosts(self) -> list[str] | None:
        """The names the client port answers to (api.browser); None: any."""
        extra = [h.strip() for h in self.allowed_hosts.split(",") if h.strip()]
        if "*" in extra:
            return None
        own = [self.client_host] if self.client_host not in ("0.0.0.0", "::", "") else []
        return [*LOOPBACK_NAMES, *own, host_name(urlsplit(self.client_url).netloc), *extra]

    def client_proxies(self) -> dict[str, Any]:
        """uvicorn's proxy options: proxy headers honoured from `trusted_proxies` only (uvicorn's own
        default trusts loopback, so any local page could name its scheme)."""
        proxies = [p.strip() for p in self.trusted_proxies.split(",") if p.strip()]
        for proxy in proxies:
            try:
                ipaddress.ip_network(proxy, strict=False)
            except ValueError:
                raise SettingsError(f"trusted_proxies: {proxy!r} is not an address or a network") from None
        return {"proxy_headers": bool(proxies), "forwarded_allow_ips": proxies or None}

    def client_origins(self) -> list[str]:
        return [o.strip() for o in self.allowed_origins.split(",") if o.strip()]

    def join_tls(self) -> ssl.SSLContext | bool:
        """How a join checks the member it asks: the group's CA (join_ca, else peer_tls_ca), else the system's."""
        ca = self.join_ca or self.peer_tls_ca
        return ssl.create_default_context(cafile=str(ca)) if ca is not None else True

    def secret(self) -> bytes | None:
        """The cluster secret, from the setting or its file; None: peer calls are not checked."""
        if self.cluster_secret is not None:
            value, source = self.cluster_secret.get_secret_value(), "cluster_secret"
        elif self.cluster_secret_file is not None:
            value, source = _read(self.cluster_secret_file, "cluster_secret_file"), str(self.cluster_secret_file)
        else:
            return None
        value = value.strip()
        if not is_credential(value):
            raise SettingsError(f"{source}: the cluster secret must be {TOKEN_CHARS_MIN} or more printable ASCII "
                                "characters, without spaces")
        return value.encode()

    def client_tokens(self) -> Tokens | None:
        """The client API's tokens; None: the client port does not check tokens."""
        parts = []
        try:
            if self.tokens is not None:
                parts.append(Tokens.parse(self.tokens.get_secret_value(), "tokens", lines=False))
            if self.tokens_file is not None:
                parts.append(Tokens.parse(_read(self.tokens_file, "tokens_file"), str(self.tokens_file), lines=True))
        except TokenError as exc:
            raise SettingsError(str(exc)) from None
        tokens = Tokens.merge(parts)
        if parts and not tokens.callers:
            raise SettingsError("tokens: no token given")
        return tokens if parts else None

    def client_tls(self) -> dict[str, Any]:
        """uvicorn's certificate options for the client port (empty: plain HTTP)."""
        if self.client_tls_cert is None:
            return {}
        options: dict[str, Any] = {"ssl_certfile": str(self.client_tls_cert),
                                   "ssl_keyfile": str(self.client_tls_key)}
        if self.client_tls_ca is not None:
            options.update(ssl_ca_certs=str(self.client_tls_ca), ssl_cert_reqs=ssl.CERT_REQUIRED)
        return options

    def grpc_credentials(self) -> tuple[bytes, bytes, bytes | None] | None:
        """The gRPC API's TLS from the client port's files: key, certificate chain, and the CA that
        signs client certificates when they are required; None: plaintext."""
        if self.client_tls_cert is None:
            return None
        assert self.client_tls_key is not None
        ca = None if self.client_tls_ca is None else _read(self.client_tls_ca, "client_tls_ca").encode()
        return (_read(self.client_tls_key, "client_tls_key").encode(),
                _read(self.client_tls_cert, "client_tls_cert").encode(), ca)

    def peer_tls(self) -> PeerTls | None:
        """Mutual TLS on the peer port: this member serves and calls with its certificate, and takes
        only peers whose certificate the CA signed."""
        if self.peer_tls_cert is None:
            return None
        assert self.peer_tls_ca is not None and self.peer_tls_key is not None
        return PeerTls(_read(self.peer_tls_ca, "peer_tls_ca").encode(),
                       _read(self.peer_tls_key, "peer_tls_key").encode(),
                       _read(self.peer_tls_cert, "peer_tls_cert").encode())

    def _check_security(self) -> None:
        for cert, key, what in ((self.client_tls_cert, self.client_tls_key, "client_tls"),
                                (self.peer_tls_cert, self.peer_tls_key, "peer_tls")):
            if (cert is None) != (key is None):
                raise SettingsError(f"{what}_cert and {what}_key go together")
        if self.client_tls_ca is not None and self.client_tls_cert is None:
            raise SettingsError("client_tls_ca needs client_tls_cert and client_tls_key")
        if (self.peer_tls_cert is None) != (self.peer_tls_ca is None):
            raise SettingsError("mutual TLS on the peer port needs peer_tls_cert, peer_tls_key and peer_tls_ca")
        for name in ("client_tls_cert", "client_tls_key", "client_tls_ca", "peer_tls_cert", "peer_tls_key",
                     "peer_tls_ca"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise SettingsError(f"{name}: {path} is not a file")
        try:
            if self.peer_tls_cert is not None:  # the files are PEM the ssl module reads, as gRPC will
                ssl.create_default_context(cafile=str(self.peer_tls_ca)).load_cert_chain(
                    str(self.peer_tls_cert), str(self.peer_tls_key))
            if self.client_tls_cert is not None:
                ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
                    str(self.client_tls_cert), str(self.client_tls_key))
        except ssl.SSLError as exc:
            raise SettingsError(f"TLS settings: {exc}") from None
        secret, tokens = self.secret(), self.client_tokens()
        if self.insecure:
            return
        remote_peers = self._remote_peers()
        if remote_peers and secret is None:
            raise SettingsError(f"peers beyond loopback ({', '.join(remote_peers)}) need cluster_secret or "
                                f"cluster_secret_file (or insecure=true to run without)")
        listeners = [f"client port on {self.client_host}"] if not is_loopback(self.client_host) else []
        if not is_loopback(self.grpc_listen[0]):
            listeners.append(f"gRPC port on {self.grpc_listen[0]}")
        if (listeners or remote_peers) and tokens is None:
            where = ", ".join(listeners + remote_peers)
            raise SettingsError(f"listening beyond loopback ({where}) needs client tokens: tokens or tokens_file "
                                f"(or insecure=true to run without)")

    def _remote_peers(self) -> list[str]:
        """The peers, and this member's own peer port, beyond loopback."""
        remote = [f"{p.id}-{p.address}" for p in (*parse_peers(self.peers), *parse_routes(self.peer_routes))
                  if not is_loopback(p.address.rpartition(":")[0])]
        if not is_loopback(self.peer_address[0]):
            remote.append(f"this member's peer port on {self.peer_address[0]}")
        return remote

    def cleartext_warnings(self) -> list[str]:
        """What crosses a network beyond loopback unencrypted: logged at start."""
        warnings = []
        if self.peer_tls_cert is None and self.secret() is not None and self._remote_peers():
            warnings.append("the cluster secret goes to peers beyond loopback in cleartext: anyone who sees the "
                            "traffic can take it; set peer_tls_cert, peer_tls_key and peer_tls_ca")
        for host in {self.client_host, self.grpc_listen[0]}:
            if self.client_tls_cert is None and self.client_tokens() is not None and not is_loopback(host):
                warnings.append(f"clients send their tokens to {host} in cleartext; set client_tls_cert and "
                                "client_tls_key")
        return warnings

    def check(self) -> None:
        """Build every layer's configuration once: the first bad value raises SettingsError."""
        try:
            self.raft_config()
            self.store_config()
            self.api_limits()
            self.peer_address  # noqa: B018 - parses this member's peer port
            self.peer_route_map()
            self.client_proxies()
        except (ValueError, StopIteration) as exc:
            raise SettingsError(str(exc) or "bad settings") from None
        for name in ("client_port", "grpc_port"):
            if not 0 <= getattr(self, name) < 65536:
                raise SettingsError(f"{name} {getattr(self, name)} is not a TCP port number")
        if self.grpc_listen == (self.client_host, self.client_port):
            raise SettingsError(f"grpc_port {self.grpc_port} is the client port: give the gRPC API a port of its own")
        for peer in parse_peers(self.peers):
            port = peer.address.rpartition(":")[2]
            if not port.isdigit() or not 0 < int(port) < 65536:
                raise SettingsError(f"peer {peer.id}: {port!r} in {peer.address!r} is not a TCP port number")
        if self.join is not None and not self.join.startswith(("http://", "https://")):
            raise SettingsError(f"join {self.join!r}: expected a member's client URL, http://host:port")
        self._check_layers(self.raft_config(), self.store_config(), self.api_limits())
        self._check_security()

    @staticmethod
    def _check_layers(raft: RaftConfig, store: StoreConfig, limits: ApiLimits) -> None:
        """The bounds that tie one layer's settings to another's."""
        if limits.max_inflight_body_bytes < limits.max_request_bytes:
            raise SettingsError(f"max_inflight_body_bytes {limits.max_inflight_body_bytes} is below max_request_bytes "
                                f"{limits.max_request_bytes}: a request of the largest size could never be taken")
        if limits.peer_window_bytes < raft.push_inflight_bytes_max:
            raise SettingsError(f"peer_window_bytes {limits.peer_window_bytes} is below push_inflight_bytes_max "
                                f"{raft.push_inflight_bytes_max}: a leader could not keep that much in flight")
        if limits.max_entry_bytes + HEADER_SIZE + STAMP_SIZE > store.max_entry_size:  # a producer's entry too
            raise SettingsError(f"max_entry_bytes {limits.max_entry_bytes} does not fit in a data file "
                                f"of data_file_size {store.data_file_size}")


def _read(path: Path, setting: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{setting}: cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None


def _derived_fields() -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for cls in (RaftConfig, StoreConfig, ApiLimits):
        hints = get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name not in NOT_SETTINGS:
                fields[f.name] = (hints[f.name], f.default)
    return fields


Settings = create_model("Settings", __base__=NodeSettings, __doc__=NodeSettings.__doc__, **_derived_fields())


def load_settings(values: dict[str, Any] | None = None, toml_file: Path | None = None) -> NodeSettings:
    """Settings from flags (`values`), the environment and an optional TOML file, checked."""
    for name, replaced in REMOVED.items():  # the environment's unknown names are not looked at otherwise
        if f"RAFTLOG_{name.upper()}" in os.environ:
            raise SettingsError(f"RAFTLOG_{name.upper()}: {name} is no setting any more: {replaced}")
    cls = Settings
    if toml_file is not None:
        if not toml_file.is_file():
            raise SettingsError(f"settings file {toml_file} does not exist")
        cls = type("Settings", (Settings,), {"model_config": {**Settings.model_config, "toml_file": toml_file}})
    try:
        settings = cls(**(values or {}), toml_file=toml_file)
    except ValidationError as exc:
        first = exc.errors()[0]
        if (removed := next((str(e["loc"][0]) for e in exc.errors() if e["loc"] and e["loc"][0] in REMOVED), None)):
            raise SettingsError(f"setting {removed} is no setting any more: {REMOVED[removed]}") from None
        where = ".".join(str(p) for p in first["loc"])
        raise SettingsError(f"setting {where}: {first['msg']}") from None
    except ValueError as exc:  # a TOML file that does not parse
        raise SettingsError(f"settings file {toml_file}: {exc}") from None
    settings.check()
    return settings

