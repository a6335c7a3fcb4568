"""The one typed settings object.

Values come, highest priority first, from: keyword arguments, ``VERILIVE_*`` environment
variables, a ``.env`` file in the working directory, the TOML file named by ``VERILIVE_CONFIG``,
and the defaults below. No other module reads the environment.
"""

from __future__ import annotations

import datetime as dt
import os
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

ENV_PREFIX = "VERILIVE_"
# Settings renamed for what they mean (issue 45): old name -> new. The old names are still read, from
# the environment, .env and the TOML file.
RENAMED = {
    "capture_burst_limit": "capture_device_captures_per_minute",
    "capture_min_height": "capture_min_image_side",
}


class _TomlFileSource(PydanticBaseSettingsSource):
    """Reads the file named by VERILIVE_CONFIG (TOML, top-level keys = field names)."""

    def __init__(self, settings_cls: type[BaseSettings]) -> None:
        super().__init__(settings_cls)
        path = os.environ.get(f"{ENV_PREFIX}CONFIG")
        self._data: dict[str, Any] = {}
        if path:
            p = Path(path)
            if not p.is_file():
                raise ValueError(f"VERILIVE_CONFIG names {p}, which is not a file")
            with p.open("rb") as f:
                self._data = tomllib.load(f)

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        data = {
            RENAMED.get(k, k): v
            for k, v in self._data.items()
            if k in RENAMED and RENAMED[k] not in self._data
        }
        data.update(self._data)
        return {k: v for k, v in data.items() if k in self.settings_cls.model_fields}


API_SCOPES = ("check", "backoffice", "metrics")


class ApiKeyEntry(BaseModel):
    """One configured API key: its name (logged), the sha256 of the key (hex; the key itself is
    never configured), its scopes, and an optional rate limit (docs/security.md#api-keys)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9._-]{1,64}$")
    sha256: str = Field(pattern=r"^[0-9a-fA-F]{64}$")
    scopes: tuple[Literal["check", "backoffice", "metrics"], ...] = Field(min_length=1)
    rate_per_minute: int | None = Field(None, ge=1, description="Requests per minute, all replicas together.")


# A path prefix: empty, or '/'-separated non-empty segments of URL path characters, no trailing '/'.
ROOT_PATH_PATTERN = r"^(/[A-Za-z0-9._~!$&'()*+,;=:@%-]+)*$"


def _renamed(name: str, old: str) -> AliasChoices:
    """A setting renamed: read from its field name, its variable, and the variable of its old name."""
    return AliasChoices(name, ENV_PREFIX + name.upper(), ENV_PREFIX + old.upper())


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=".env",
        extra="ignore",
        validate_default=True,
        populate_by_name=True,
    )

    # --- network ---
    host: str = Field("127.0.0.1", description="Address the services listen on.")
    face_port: int = Field(8080, ge=0, le=65535, description="Port of the face liveness service.")
    voice_port: int = Field(8081, ge=0, le=65535, description="Port of the voice analysis service.")
    capture_port: int = Field(8082, ge=0, le=65535, description="Port of the capture liveness service.")

    # --- models ---
    models_dir: Path = Field(
        default_factory=lambda: Path(platformdirs.user_cache_dir("verilive")) / "models",
        description="Where pulled and converted models live.",
    )
    model_mirror: Path | None = Field(
        None, description="Local folder searched first, by file name, for model source files."
    )
    require_models: bool = Field(
        True, description="Refuse to start a service whose models are not installed."
    )
    onnx_intra_op_threads: int = Field(
        0, ge=0, description="onnxruntime intra-op threads per session (0 = onnxruntime's default)."
    )
    onnx_spinning: bool = Field(
        False,
        description="Let idle onnxruntime threads busy-wait for the next run (faster only on cores "
        "that nothing else uses; docs/benchmarks.md).",
    )

    # --- limits ---
    max_body_bytes: int = Field(
        50 * 1024 * 1024, gt=0, description="Largest request body accepted; larger ones get 413."
    )
    max_audio_seconds: float = Field(
        4 * 3600.0, gt=0, description="Longest decoded audio accepted, in seconds."
    )
    max_audio_samples: int = Field(
        2**27,
        gt=0,
        description="Most decoded samples (frames x channels) per request: bounds memory (4 bytes each).",
    )

    # --- production workers (docs/deployment.md) ---
    workers: int = Field(1, ge=1, le=64, description="Worker processes per service (about one per core).")
    malloc_arenas: int = Field(
        1,
        ge=0,
        le=64,
        description="glibc malloc arenas per process (0 = glibc's default, 8 per core). One keeps memory "
        "that concurrent requests free reusable by the next one (docs/benchmarks.md).",
    )
    threadpool_size: int = Field(
        0, ge=0, description="Threads per worker for inference and other blocking work (0 = anyio's 40)."
    )
    graceful_timeout_s: float = Field(
        30.0, gt=0, description="On SIGTERM, how long in-flight requests may take to finish, seconds."
    )
    limit_concurrency: int = Field(
        0, ge=0, description="Connections per worker before new requests get 503 (0 = no limit)."
    )
    backlog: int = Field(2048, ge=1, description="Listen backlog of each service socket.")
    keep_alive_s: float = Field(
        75.0, gt=0, description="Idle keep-alive time of client connections; longer than the proxy's."
    )
    root_path: str = Field(
        "",
        pattern=ROOT_PATH_PATTERN,
        description=(
            "Path prefix the services are reached under behind a gateway (e.g. /face): uvicorn's "
            "root_path. Empty: none. API key scopes are decided on the path without it."
        ),
    )

    # --- licence and identity ---
    license_expiration_date: dt.date = Field(
        dt.date(2099, 12, 31),
        description="Date reported as the licence expiry; /health answers 503 after it.",
    )
    git_commit: str | None = Field(
        None, description="Commit reported by get_build_info when the install has no git checkout."
    )

    # --- voice service ---
    voice_operator_templates: list[str] = Field(
        default_factory=list,
        description="Voice templates of call-centre operators (JSON list); enables phoneCallParticipant.",
    )
    voice_customer_templates: list[str] = Field(
        default_factory=list, description="Voice templates of known customers (JSON list), likewise."
    )

    # --- capture service ---
    capture_api_version: Literal["2.0.0", "2.1.0"] = Field(
        "2.1.0", description="Capture liveness interface version to answer as (2.0.0 for old clients)."
    )
    capture_private_keys: list[str] = Field(
        default_factory=list,
        description="Bundle private keys, JSON list: PEM paths or '<key id>=<path>' (docs/bundle-format.md).",
    )
    capture_eval_key: Literal["auto", "on", "off"] = Field(
        "auto",
        description=(
            "With no capture_private_keys: make (once) and use a local evaluation key at "
            "capture_eval_key_path. auto: only when listening on a loopback address; on: on any; off: never."
        ),
    )
    capture_eval_key_path: Path = Field(
        default_factory=lambda: Path(platformdirs.user_data_dir("verilive")) / "capture-eval-key.pem",
        description="Where the local evaluation key is kept (docs/capture.md).",
    )
    capture_replay_url: str = Field(
        default_factory=lambda: (
            "sqlite:///" + str(Path(platformdirs.user_data_dir("verilive")) / "capture-replay.sqlite3")
        ),
        description="Replay store of nonces and image hashes: sqlite:///path or redis://host:port/db.",
    )
    capture_timestamp_window_s: float = Field(
        300.0, gt=0, description="SUSPICIOUS_ACTIVITY when the capture time is further from now, seconds."
    )
    capture_face_liveness: bool = Field(
        True, description="Check face liveness of the bundle image and return face_liveness."
    )
    capture_min_image_side: int = Field(
        480,
        ge=1,
        description="IMAGE_TOO_SMALL when the image's shorter side is below this (480p), pixels.",
        # The old name, VERILIVE_CAPTURE_MIN_HEIGHT, is still read (it checked the shorter side).
        validation_alias=_renamed("capture_min_image_side", "capture_min_height"),
    )
    capture_motion3d: Literal["off", "use", "require"] = Field(
        "require",
        description=(
            "3D check on a bundle's burst: off; use (flat or not bound to the still is a spoof);"
            " require (only a bound burst judged 3D passes; the default)."
        ),
    )
    capture_device_captures_per_minute: int = Field(
        10,
        ge=1,
        description="SUSPICIOUS_ACTIVITY above this many captures of one device per minute.",
        # The old name, VERILIVE_CAPTURE_BURST_LIMIT, is still read (a burst is now the head turn).
        validation_alias=_renamed("capture_device_captures_per_minute", "capture_burst_limit"),
    )
    capture_image_hash_ttl_s: float = Field(
        30 * 86400.0, gt=0, description="How long image hashes are kept to catch a reused image, seconds."
    )
    capture_sdk_extra_digests: list[str] = Field(
        default_factory=list,
        description="More trusted capture SDK digests (JSON list): '<sha256 hex>' or '<hex>@<version>'.",
    )

    # --- face service: image input and validation (docs/face.md) ---
    face_max_image_pixels: int = Field(
        40_000_000, ge=1, description="Largest image accepted, in pixels (decompression-bomb guard)."
    )
    face_max_images: int = Field(
        64, ge=1, description="Most images in one check_liveness series or check_liveness_batch request."
    )
    face_motion3d: Literal["off", "use", "require"] = Field(
        "use",
        description="3D check on check_liveness series of 3+ frames: off; use (flat, or turned but not "
        "rigid, is a spoof); require (only 3D keeps its score). Old values: true = use, false = off.",
    )
    face_backbone_model: Literal["float", "int8"] = Field(
        "float",
        description="Build of the backbone branch's EfficientNet-Lite0: float, or int8 (static "
        "quantization, faster; docs/model-efficientnet-lite.md).",
    )
    face_min_face_px: float = Field(
        60.0, ge=0, description="FACE_TOO_SMALL below this face-box height in pixels."
    )
    face_min_face_relative: float = Field(
        0.08, ge=0, le=1, description="FACE_TOO_SMALL below this face-box height / image height."
    )
    face_min_interpupillary_px: float = Field(
        20.0, ge=0, description="FACE_TOO_SMALL below this distance between the eye centres, pixels."
    )
    face_secondary_face_relative: float = Field(
        0.4,
        gt=0,
        le=1,
        description="TOO_MANY_FACES counts other faces at least this fraction of the largest face's height.",
    )
    face_cropped_fraction: float = Field(
        0.1,
        ge=0,
        le=1,
        description="FACE_CROPPED when more than this fraction of the face extent lies outside the image.",
    )
    face_border_margin: float = Field(
        0.0,
        ge=0,
        description="FACE_CLOSE_TO_BORDER when the face box is closer to an edge than this x its size "
        "(0: only a face that reaches past the edge; issue 47, docs/face.md).",
    )
    face_max_yaw: float = Field(35.0, gt=0, le=90, description="FACE_ANGLE_TOO_LARGE above |yaw|, degrees.")
    face_max_pitch: float = Field(
        25.0, gt=0, le=90, description="FACE_ANGLE_TOO_LARGE above |pitch|, degrees."
    )
    face_max_roll: float = Field(30.0, gt=0, le=90, description="FACE_ANGLE_TOO_LARGE above |roll|, degrees.")
    face_occlusion_threshold: float = Field(
        0.5, ge=0, le=1, description="FACE_IS_OCCLUDED at or above this occlusion score."
    )
    face_min_image_side: int = Field(
        240, ge=1, description="IMAGE_TOO_SMALL when the shorter image side is below this, pixels."
    )

    # --- face service: business-intelligence records (docs/bi.md) ---
    bi_database_url: str = Field(
        default_factory=lambda: (
            "sqlite:///" + str(Path(platformdirs.user_data_dir("verilive")) / "bi.sqlite3")
        ),
        description="Where BI records go: an SQLAlchemy URL (postgresql://...) or an SQLite file path.",
    )
    bi_retention_days: int = Field(
        90, ge=0, description="Days BI records are kept before they are purged (0 = keep forever)."
    )

    # --- access control ---
    api_keys: list[ApiKeyEntry] = Field(
        default_factory=list,
        description=(
            "API keys, JSON list of {name, sha256, scopes, rate_per_minute}; empty: every endpoint is "
            "open as before (docs/security.md). Make one with `verilive keys api`."
        ),
    )

    # --- logging ---
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_json: bool | None = Field(
        None,
        description=(
            "One JSON object per log line (true) or aligned plain text (false); unset: plain text "
            "when stderr is a terminal, JSON otherwise."
        ),
    )

    @model_validator(mode="after")
    def _unique_api_keys(self) -> Settings:
        names = [k.name for k in self.api_keys]
        hashes = [k.sha256.lower() for k in self.api_keys]
        if len(set(names)) != len(names) or len(set(hashes)) != len(hashes):
            raise ValueError("api_keys: each key needs its own name and its own sha256")
        return self

    @field_validator("model_mirror", mode="before")
    @classmethod
    def _empty_is_none(cls, v: Any) -> Any:
        return None if v in ("", None) else v

    @field_validator("face_motion3d", mode="before")
    @classmethod
    def _motion3d_bool(cls, v: Any) -> Any:
        """face_motion3d was a boolean before issue 43: true (or 1, yes, on) is use, false is off."""
        if isinstance(v, bool):
            return "use" if v else "off"
        if isinstance(v, int):
            return {1: "use", 0: "off"}.get(v, v)
        if isinstance(v, str):
            low = v.strip().lower()
            return {"true": "use", "1": "use", "yes": "use", "on": "use", "false": "off", "0": "off",
                    "no": "off"}.get(low, low)  # fmt: skip
        return v

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, dotenv_settings, _TomlFileSource(settings_cls))

    def port_of(self, service: str) -> int:
        return {"face": self.face_port, "voice": self.voice_port, "capture": self.capture_port}[service]


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
