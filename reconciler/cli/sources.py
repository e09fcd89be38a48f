"""`dockyard source add|list|get|update|delete|suspend|resume`: the config repos the server
follows, one per project (docs/sources.md).

Calls `POST /api/sources/…` (`reconciler.web.routes_sources`): admins manage, members list
and read their projects' sources. Secrets are given and shown as references only
(`--webhook-secret env:NAME`, `--credentials file:/path/key`): the server reads the value
where the reference points; the CLI never sends or prints a secret's value.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from reconciler.cli.console import JsonOption, ProjectOption, open_client, out, print_json, table

NameArg = Annotated[str, typer.Argument(help="The source's name.")]
RepoOption = Annotated[str | None, typer.Option("--repo", help="A path or a Git URL.")]
SourceProject = Annotated[
    str | None, typer.Option("--for-project", help="The project this source feeds.")
]
BranchOption = Annotated[str | None, typer.Option("--branch", help="The branch (main).")]
PathOption = Annotated[
    list[str] | None,
    typer.Option(
        "--path",
        help="A directory within the repo holding the configs; repeat it for several "
        "(--path '' in update: the whole repo).",
    ),
]
IntervalOption = Annotated[
    float | None, typer.Option("--fetch-interval", help="Seconds between periodic fetches.")
]
SecretOption = Annotated[
    str | None,
    typer.Option("--webhook-secret", help="Where the webhook secret is: env:NAME or file:PATH."),
]
CredentialsOption = Annotated[
    str | None,
    typer.Option("--credentials", help="Token or SSH key: env:NAME or file:PATH."),
]


def _body(**values: Any) -> dict[str, Any]:
    body = {k: v for k, v in values.items() if v is not None}
    if "path" in body:  # `--path ''` alone: the whole repo
        body["paths"] = [p for p in body.pop("path") if p != ""]
    return body


def _state(source: dict[str, Any]) -> str:
    return str(source.get("state") or ("suspended" if source["suspended"] else "following"))


def _last(source: dict[str, Any]) -> str:
    """The newest finished pass: its status, and its error's first line (shortened)."""
    last = source.get("last_reconcile")
    if not last:
        return "-"
    error = (last.get("error") or "").splitlines()[0] if last.get("error") else ""
    return f"{last['status']}: {error[:80]}" if error else str(last["status"])


def _show(source: dict[str, Any], json_: bool) -> None:
    if json_:
        print_json(source)
        return
    rows = [
        (key, "-" if source.get(key) in (None, [], "") else str(source[key]))
        for key in ("name", "project", "repo", "branch", "paths", "fetch_interval")
    ]
    rows += [
        ("state", _state(source)),
        ("last reconcile", _last(source)),
        ("webhook_secret", source.get("webhook_secret") or "(the server's --webhook-secret)"),
        ("credentials", source.get("credentials") or "-"),
        ("origin", source["origin"]),
    ]
    table(["FIELD", "VALUE"], rows)


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Manage the config repos the server follows.", no_args_is_help=True)

    @group.command("list")
    def list_(json_: JsonOption = False, project: ProjectOption = None) -> None:
        """The sources you may see (admins: all; members: their projects')."""
        with open_client(project) as client:
            listed: list[dict[str, Any]] = client.post("/api/sources/list", {})
        if json_:
            print_json(listed)
            return
        if not listed:
            out().print("No sources.")
            return
        rows = [
            (s["name"], s["project"], s["repo"], s["branch"], _state(s), s["origin"], _last(s))
            for s in listed
        ]
        table(["NAME", "PROJECT", "REPO", "BRANCH", "STATE", "ORIGIN", "LAST RECONCILE"], rows)

    @group.command("get")
    def get(name: NameArg, json_: JsonOption = False, project: ProjectOption = None) -> None:
        """One source."""
        with open_client(project) as client:
            _show(client.post("/api/sources/get", {"name": name}), json_)

    @group.command("add")
    def add(
        name: NameArg,
        repo: Annotated[str, typer.Option("--repo", help="A path or a Git URL.")],
        for_project: Annotated[
            str, typer.Option("--for-project", help="The project this source feeds.")
        ],
        branch: BranchOption = None,
        path: PathOption = None,
        fetch_interval: IntervalOption = None,
        webhook_secret: SecretOption = None,
        credentials: CredentialsOption = None,
        suspended: Annotated[bool, typer.Option("--suspended", help="Apply nothing yet.")] = False,
        json_: JsonOption = False,
        project: ProjectOption = None,
    ) -> None:
        """Follow a new source (admins)."""
        body = _body(
            name=name,
            repo=repo,
            project=for_project,
            branch=branch,
            path=path,
            fetch_interval=fetch_interval,
            webhook_secret=webhook_secret,
            credentials=credentials,
            suspended=suspended or None,
        )
        with open_client(project) as client:
            _show(client.post("/api/sources/create", body), json_)

    @group.command("update")
    def update(
        name: NameArg,
        repo: RepoOption = None,
        for_project: SourceProject = None,
        branch: BranchOption = None,
        path: PathOption = None,
        fetch_interval: IntervalOption = None,
        webhook_secret: SecretOption = None,
        credentials: CredentialsOption = None,
        json_: JsonOption = False,
        project: ProjectOption = None,
    ) -> None:
        """Change a source added through the API (admins); fields not given are kept."""
        body = _body(
            name=name,
            repo=repo,
            project=for_project,
            branch=branch,
            path=path,
            fetch_interval=fetch_interval,
            webhook_secret=webhook_secret,
            credentials=credentials,
        )
        with open_client(project) as client:
            _show(client.post("/api/sources/update", body), json_)

    @group.command("delete")
    def delete(name: NameArg, project: ProjectOption = None) -> None:
        """Stop following a source (admins); what it applied keeps running."""
        with open_client(project) as client:
            client.post("/api/sources/delete", {"name": name})
        out().print(f"Source {name} deleted.")

    @group.command("suspend")
    def suspend(name: NameArg, project: ProjectOption = None) -> None:
        """Fetch and plan, apply nothing until resumed (admins)."""
        with open_client(project) as client:
            client.post("/api/sources/suspend", {"name": name})
        out().print(f"Source {name} suspended: it plans and applies nothing.")

    @group.command("resume")
    def resume(name: NameArg, project: ProjectOption = None) -> None:
        """Apply again (admins); the next pass applies the branch head."""
        with open_client(project) as client:
            client.post("/api/sources/resume", {"name": name})
        out().print(f"Source {name} resumed.")

    app.add_typer(group, name="source")
