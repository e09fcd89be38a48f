"""A process job's `user:` is the server operator's choice, refused at plan time.

Tried as a project member would: a config repo whose runs name `user: root` and another
local account (`daemon`), and the same configs posted to the API (`dockyard apply`'s
`runs/get_plan` / `runs/apply`, dstack's `run_spec` bodies). A real server built by the
composition root with the real runtime (the server's `DOCKYARD_LOCAL_ALLOW_JOB_USERS` lists
`nobody`): the reconcile's plan shows both runs blocked with the rule (file, run, field,
the setting) and starts neither; the API plans them blocked and refuses to apply them (400,
the rule), while a listed account and a container's `user:` (dstack's meaning) plan as
creates. The agents' own refusal at submit is tests/security/test_process_sandbox.py's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.adapters.db import Store
from reconciler.core.jobusers import JobUserRule, check_job_users
from reconciler.domain.kinds import Kind
from reconciler.domain.plan import Action, ActionKind
from reconciler.ports import Controller
from reconciler.settings import Settings
from tests.pr.gitrepo import make_repo
from tests.web.serving import Running, running_server, wait_until

SETTING = "DOCKYARD_LOCAL_ALLOW_JOB_USERS for the local fleet"
ATTACKS = {
    "asroot.dstack.yml": b"type: task\nname: asroot\nuser: root\ncommands: [id]\n",
    "asdaemon.dstack.yml": b"type: task\nname: asdaemon\nuser: daemon\ncommands: [id]\n",
}


def _real(settings: Settings, store: Store) -> Controller:
    from reconciler.engine.controller import build_controller

    return build_controller(settings, store)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Running]:
    repo, head = make_repo(tmp_path / "cfg", ATTACKS)
    with running_server(
        tmp_path, _real, repo=str(repo), fetch_interval=3600, local_allow_job_users="nobody"
    ) as running:
        store = running.server.store

        def applied() -> bool:
            project = store.get_project("main")
            return project is not None and store.last_applied_revision(project.id) == head

        wait_until(applied, timeout=60, what="the startup reconcile")
        yield running


def test_the_reconcile_blocks_a_process_job_naming_an_unlisted_account(server: Running) -> None:
    store = server.server.store
    project = store.get_project("main")
    assert project is not None
    [row] = store.list_reconciles(project.id, status="succeeded", limit=1)
    assert row.plan is not None
    actions = {a["name"]: a for a in row.plan["actions"]}
    for name, user in (("asroot", "root"), ("asdaemon", "daemon")):
        action = actions[name]
        assert action["action"] == "blocked", action
        [line] = action["violations"]
        assert line.startswith(f"server: {name}.dstack.yml: run {name}: `user: {user}`"), line
        assert "remove `user`" in line and "`image:`" in line, line
    assert "--ssh-allow-root-jobs is off" in actions["asroot"]["violations"][0]
    daemon = actions["asdaemon"]["violations"][0]
    assert SETTING in daemon and "listed: nobody" in daemon, daemon
    assert store.list_runs(project.id) == []  # nothing of them started


def test_the_api_plans_them_blocked_and_refuses_to_apply_them(server: Running) -> None:
    with server.client(server.admin_token) as http:
        for path, text in ATTACKS.items():
            body = {"text": text.decode(), "path": path}
            planned = http.post("/api/project/main/runs/get_plan", json=body)
            assert planned.status_code == 200, planned.text
            assert planned.json()["action"] == "blocked", planned.text
            assert "`user: " in planned.json()["reason"], planned.text
            applied = http.post("/api/project/main/runs/apply", json=body)
            assert applied.status_code == 400, applied.text
            assert "a process job may run only as" in applied.text or "as root" in applied.text
        # dstack's own bodies (`dstack apply`), the same refusal
        spec = {
            "run_name": "viaspec",
            "configuration": {"type": "task", "name": "viaspec", "user": "daemon",
                              "commands": ["id"]},
            "configuration_path": "viaspec.dstack.yml",
        }  # fmt: skip
        dstack_bodies: list[tuple[str, dict[str, object]]] = [
            ("get_plan", {"run_spec": spec}),
            ("apply", {"plan": {"run_spec": spec}}),
        ]
        for route, dstack_body in dstack_bodies:
            refused = http.post(f"/api/project/main/runs/{route}", json=dstack_body)
            assert refused.status_code == 400, refused.text
            assert "listed: nobody" in refused.text, refused.text
        # a listed account, and a container's user (dstack's meaning), plan as creates
        for allowed in (
            "type: task\nname: listed\nuser: nobody\ncommands: [id]\n",
            "type: task\nname: boxed\nimage: busybox\nuser: root\ncommands: [id]\n",
        ):
            planned = http.post(
                "/api/project/main/runs/get_plan", json={"text": allowed, "path": "x.dstack.yml"}
            )
            assert planned.json()["action"] == "create", planned.text
        names = [
            r.get("run_name") for r in http.post("/api/project/main/runs/list", json={}).json()
        ]
    assert not {"asroot", "asdaemon", "viaspec"} & set(names)


def _run(name: str, **spec: object) -> Action:
    return Action(ActionKind.CREATE, Kind.TASK, name, "main", f"{name}.dstack.yml", "new",
                  spec={"type": "task", "commands": ["id"], **spec})  # fmt: skip


def test_the_rule_judges_process_jobs_only_and_an_offline_plan_not_at_all() -> None:
    rule = JobUserRule(allowed=frozenset({"builder"}))
    actions = [
        _run("a", user="root"),
        _run("b", user="0"),
        _run("c", user="builder"),
        _run("d", image="busybox", user="root"),
        _run("e", docker=True, user="daemon"),
        _run("f"),
        _run("g", user="daemon\x1b[2J"),
    ]
    checked = {a.name: a for a in check_job_users(actions, rule)}
    blocked = {name for name, a in checked.items() if a.action is ActionKind.BLOCKED}
    assert blocked == {"a", "b", "g"}
    assert "\x1b" not in checked["g"].reason and "\\x1b[2J" in checked["g"].reason
    assert check_job_users(actions, None) == tuple(actions)  # offline: not checked
    everything = JobUserRule(allow_root=True, process_jobs=False)
    assert not any(a.action is ActionKind.BLOCKED for a in check_job_users(actions, everything))
    settings = Settings.from_env(
        {"DOCKYARD_LOCAL_ALLOW_JOB_USERS": "nobody", "DOCKYARD_SSH_ALLOW_JOB_USERS": "builder"}
    )
    assert settings.job_user_rule().allowed == {"nobody", "builder"}
