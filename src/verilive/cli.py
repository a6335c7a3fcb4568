"""The `verilive` command: serve the services, manage models, print the version."""

from __future__ import annotations

import os
import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

import verilive
from verilive.config import ROOT_PATH_PATTERN, Settings, get_settings

app = typer.Typer(
    help="verilive: self-hosted voice analysis, face liveness and capture liveness.", no_args_is_help=True
)
err = Console(stderr=True)


class ServiceName(StrEnum):
    voice = "voice"
    face = "face"
    capture = "capture"
    all = "all"


def _mount_models() -> None:
    from verilive.models.cli import models_app

    app.add_typer(models_app, name="models", help="Pull, list and verify models.")


@app.command()
def version() -> None:
    """Print the verilive version."""
    typer.echo(verilive.__version__)


@app.command()
def serve(
    service: Annotated[ServiceName, typer.Argument(help="voice, face, capture, or all (three ports).")],
    host: Annotated[str | None, typer.Option(help="Listen address (default from VERILIVE_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port, for a single service.")] = None,
    face_port: Annotated[int | None, typer.Option(help="Face port with 'all' (default 8080).")] = None,
    voice_port: Annotated[int | None, typer.Option(help="Voice port with 'all' (default 8081).")] = None,
    capture_port: Annotated[int | None, typer.Option(help="Capture port with 'all' (default 8082).")] = None,
    workers: Annotated[
        int | None, typer.Option(min=1, max=64, help="Worker processes (default VERILIVE_WORKERS, 1).")
    ] = None,
    root_path: Annotated[
        str | None,
        typer.Option(help="Path prefix behind a gateway, e.g. /face (default VERILIVE_ROOT_PATH, none)."),
    ] = None,
) -> None:
    """Run one service, or all three in one process on three ports."""
    from verilive.models.sessions import ModelRegistry, install_hint
    from verilive.server.app import DEFINITIONS, SERVICES, create_service_app
    from verilive.server.logs import configure_logging
    from verilive.server.runner import ServerOptions, limit_malloc_arenas, run_apps, run_workers

    settings: Settings = get_settings()
    limit_malloc_arenas(settings.malloc_arenas)  # before any model session starts its threads
    overrides = {
        k: v
        for k, v in {
            "host": host,
            "face_port": face_port,
            "voice_port": voice_port,
            "capture_port": capture_port,
            "workers": workers,
            "root_path": root_path,
        }.items()
        if v is not None
    }
    if port is not None:
        if service is ServiceName.all:
            raise typer.BadParameter(
                "use --face-port/--voice-port/--capture-port with 'all'", param_hint="--port"
            )
        overrides[f"{service.value}_port"] = port
    if root_path is not None:
        overrides["root_path"] = root_path = root_path.rstrip("/")
        if not re.fullmatch(ROOT_PATH_PATTERN, root_path):
            raise typer.BadParameter(
                "a path prefix starts with '/' and holds URL path characters, e.g. /face",
                param_hint="--root-path",
            )
    if overrides:
        settings = settings.model_copy(update=overrides)
    configure_logging(settings.log_level, settings.log_json)

    names = list(SERVICES) if service is ServiceName.all else [service.value]
    registry = ModelRegistry(settings)
    needed = sorted({m for n in names for m in DEFINITIONS[n].required_models})
    missing = registry.missing(needed)
    if missing and settings.require_models:
        err.print(f"[red]Models not installed:[/red] {', '.join(missing)} (models dir {settings.models_dir})")
        err.print(f"Install them with: [bold]{install_hint(missing)}[/bold]")
        raise typer.Exit(2)

    for n in names:
        err.print(
            f"verilive {n} on http://{settings.host}:{settings.port_of(n)}"
            + (f" under the path prefix {settings.root_path}" if settings.root_path else "")
            + "  (Swagger UI: /swagger-ui/index.html)"
            + (f", {settings.workers} workers" if settings.workers > 1 else "")
        )
    if settings.workers > 1:
        # Each worker process builds its own apps and loads its own models (docs/deployment.md).
        try:
            code = run_workers(names, settings)
        except OSError as exc:
            err.print(f"[red]cannot listen: {exc}[/red]")
            raise typer.Exit(1) from exc
        if code:
            raise typer.Exit(code)
        return
    apps = [(create_service_app(n, settings, registry), settings.host, settings.port_of(n)) for n in names]
    try:
        run_apps(apps, ServerOptions.from_settings(settings))
    except RuntimeError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from exc


keys_app = typer.Typer(
    help="Capture bundle key pairs (docs/bundle-format.md) and API keys (docs/security.md).",
    no_args_is_help=True,
)
app.add_typer(keys_app, name="keys")


@keys_app.command("generate")
def keys_generate(
    out: Annotated[
        Path | None,
        typer.Option(help="Private key PEM to write (default ./capture-key-<key id>.pem); never overwrites."),
    ] = None,
) -> None:
    """Make a P-256 key pair: write the private key (mode 0600), print key id and public key."""
    from verilive.capture.bundle import generate_key

    key_id, pem, public_b64 = generate_key()
    path = out if out is not None else Path(f"capture-key-{key_id}.pem")
    try:
        # O_EXCL: never clobber a key that may still be in use; 0o600 from creation, no umask race.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        err.print(f"[red]Cannot create {path}: {exc.strerror}[/red]")
        raise typer.Exit(1) from exc
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    os.chmod(path, 0o600)  # exactly 0600 whatever the umask took away
    typer.echo(f"private key: {path}")
    typer.echo(f"key id: {key_id}")
    typer.echo(f"public key: {public_b64}")


@keys_app.command("api")
def keys_api(
    name: Annotated[str, typer.Option(help="The key's name: logged with every request it makes.")],
    scopes: Annotated[
        list[str], typer.Option("--scope", help="check, backoffice or metrics; repeat for more than one.")
    ],
    rate_per_minute: Annotated[
        int | None, typer.Option(min=1, help="At most this many requests per minute, all replicas together.")
    ] = None,
) -> None:
    """Make an API key: print the key once, and the VERILIVE_API_KEYS entry (its hash) to configure."""
    import json
    import secrets

    from pydantic import ValidationError

    from verilive.config import ApiKeyEntry
    from verilive.server.auth import key_digest

    key = secrets.token_urlsafe(32)
    try:
        entry = ApiKeyEntry(
            name=name,
            sha256=key_digest(key),
            scopes=tuple(dict.fromkeys(scopes)),  # type: ignore[arg-type]
            rate_per_minute=rate_per_minute,
        )
    except ValidationError as exc:
        err.print(f"[red]Invalid key settings: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}[/red]")
        raise typer.Exit(2) from exc
    typer.echo(f"key (shown once, give it to the client): {key}")
    typer.echo("entry for VERILIVE_API_KEYS (add it to the JSON list):")
    typer.echo(json.dumps(entry.model_dump(exclude_none=True)))


_mount_models()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
