"""Node settings: flags > environment (RAFTLOG_...) > TOML file > defaults.

The node's own settings are declared here; the DLedger-derived ones are taken
field by field from the layers that own them (raft.RaftConfig,
storage.StoreConfig, api.ApiLimits), so each default lives in one place and
the README's settings tables document them. `Settings.build()` validates them
all together and raises SettingsError with one line that says what is wrong.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal, get_type_hints

from pydantic import ValidationError, create_model
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from api.service import ApiLimits
from raft.config import RaftConfig, parse_peers
from storage.codec import HEADER_SIZE
from storage.config import StoreConfig

NOT_SETTINGS = {"self_id", "peers", "preferred_leader_ids"}


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
    preferred_leaders: str = ""  # DLedger's preferredLeaderIds, ';'-separated
    checkpoint_interval_ms: int = 3000  # how often committed/applied indices are written to SQLite
    # a committed entry found damaged or missing on open: cut it away and get it again from the peers (the
    # member neither votes nor stands until it has); false: refuse to start, for an operator to decide
    repair_from_peers: bool = True
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["text", "json"] = "text"  # json: one object per line, for log shippers

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

    def store_config(self) -> StoreConfig:
        return StoreConfig(**self._values_of(StoreConfig))

    def api_limits(self) -> ApiLimits:
        return ApiLimits(**self._values_of(ApiLimits))

    def _values_of(self, cls: type) -> dict[str, Any]:
        names = {f.name for f in dataclasses.fields(cls)} - NOT_SETTINGS
        return {name: getattr(self, name) for name in names}

    @property
    def peer_address(self) -> tuple[str, int]:
        """Where this member's peer port listens."""
        address = next(p.address for p in parse_peers(self.peers) if p.id == self.id)
        host, _, port = address.rpartition(":")
        return self.peer_host or host, int(port)

    @property
    def client_url(self) -> str:
        if self.advertise_client_url:
            return self.advertise_client_url.rstrip("/")
        host = self.client_host
        if host in ("0.0.0.0", "::", ""):
            host = self.peer_address[0] if self.peer_host is None else "127.0.0.1"
        return f"http://{host}:{self.client_port}"

    def check(self) -> None:
        """Build every layer's configuration once: the first bad value raises SettingsError."""
        try:
            self.raft_config()
            self.store_config()
            self.api_limits()
            self.peer_address  # noqa: B018 - parses this member's peer port
        except (ValueError, StopIteration) as exc:
            raise SettingsError(str(exc) or "bad settings") from None
        if not 0 <= self.client_port < 65536:
            raise SettingsError(f"client_port {self.client_port} is not a TCP port number")
        for peer in parse_peers(self.peers):
            port = peer.address.rpartition(":")[2]
            if not port.isdigit() or not 0 < int(port) < 65536:
                raise SettingsError(f"peer {peer.id}: {port!r} in {peer.address!r} is not a TCP port number")
        if self.max_entry_bytes + HEADER_SIZE > self.store_config().max_entry_size:
            raise SettingsError(f"max_entry_bytes {self.max_entry_bytes} does not fit in a data file "
                                f"of data_file_size {self.data_file_size}")


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
    cls = Settings
    if toml_file is not None:
        if not toml_file.is_file():
            raise SettingsError(f"settings file {toml_file} does not exist")
        cls = type("Settings", (Settings,), {"model_config": {**Settings.model_config, "toml_file": toml_file}})
    try:
        settings = cls(**(values or {}), toml_file=toml_file)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise SettingsError(f"setting {where}: {first['msg']}") from None
    except ValueError as exc:  # a TOML file that does not parse
        raise SettingsError(f"settings file {toml_file}: {exc}") from None
    settings.check()
    return settings
