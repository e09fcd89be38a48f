"""`dockyard schema`: print or write the JSON Schema of the configuration language.

`--write` regenerates `schemas/json/` (one file per type, `dstack-config.json`, and
`dockyard.json` for the repo policy `.dockyard.yml`, `reconciler.core.policyschema`);
`--check` exits 1 when the committed files are stale. Editors use the files through a
`# yaml-language-server: $schema=...` line (docs/configuration.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import schemas
from reconciler.core.policyschema import POLICY_SCHEMA_NAME, policy_schema
from schemas.jsonschema import COMBINED_NAME, build_schemas, dump_schema

DEFAULT_DIR = Path(schemas.__file__).resolve().parent / "json"


def register(app: typer.Typer) -> None:
    app.command("schema")(schema_command)


def schema_command(
    write: Annotated[bool, typer.Option("--write", help="Write the files.")] = False,
    check: Annotated[bool, typer.Option("--check", help="Fail if files are stale.")] = False,
    directory: Annotated[
        Path, typer.Option("--dir", help="Where the schema files live.")
    ] = DEFAULT_DIR,
    kind: Annotated[
        str, typer.Option("--type", help="Print this type's schema instead of the combined one.")
    ] = COMBINED_NAME,
) -> None:
    """Print the JSON Schema of .dstack.yml files, or write/check `schemas/json/`.

    `--type dockyard` prints the schema of the repo policy, `.dockyard.yml`.
    """
    files = all_schemas()
    if write:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (directory / name).write_text(text, encoding="utf-8")
        typer.echo(f"wrote {len(files)} schema files to {directory}")
        return
    if check:
        stale = stale_files(files, directory)
        for name in stale:
            typer.echo(f"stale: {directory / name}", err=True)
        if stale:
            typer.echo("run `dockyard schema --write`", err=True)
        raise typer.Exit(1 if stale else 0)
    if f"{kind}.json" not in files:
        typer.echo(f"error: unknown type {kind!r}", err=True)
        raise typer.Exit(2)
    typer.echo(files[f"{kind}.json"], nl=False)


def all_schemas() -> dict[str, str]:
    """File name -> JSON text of every file under `schemas/json/`."""
    return {**build_schemas(), f"{POLICY_SCHEMA_NAME}.json": dump_schema(policy_schema())}


def stale_files(files: dict[str, str], directory: Path) -> list[str]:
    """Names whose file under `directory` is missing or differs from `files`."""
    stale = []
    for name, text in sorted(files.items()):
        path = directory / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(name)
    return stale
