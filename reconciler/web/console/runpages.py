"""The console's run pages: the runs of a project (filtered, live), one run (spec, jobs,
events, live logs with search, ports, the proxy URL, the attach command, usage charts, a
stop button), and the project's cost figures. Added by `pages.build_console_router`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import anyio
from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from reconciler.adapters.db.readmodels.project import list_events
from reconciler.adapters.db.readmodels.runs import find_job, get_run, list_runs
from reconciler.api import models as wire
from reconciler.core.dstack_wire import strip_nulls
from reconciler.domain.metrics import JobSample
from reconciler.engine.joblogs import dropped_notice, job_log_path, read_log
from reconciler.web.auth import ProjectAccess
from reconciler.web.console.access import project_of
from reconciler.web.console.charts import Series, line_chart
from reconciler.web.console.costs import Spend, cost_between, hourly_rates, rate_at
from reconciler.web.console.rendering import SECURITY_HEADERS
from reconciler.web.console.state import Console
from reconciler.web.context import WebContext, get_context

LOG_WINDOW = 64 * 1024
RUN_KINDS = ("task", "service", "dev-environment")


def _now(context: WebContext) -> datetime:
    return datetime.fromtimestamp(context.clock.now_ts(), UTC)


def _filtered(runs: list[wire.Run], status: str, kind: str, origin: str) -> list[wire.Run]:
    def keep(run: wire.Run) -> bool:
        run_kind = str((run.run_spec.get("configuration") or {}).get("type", ""))
        run_origin = "git" if (run.origin or "").startswith("git:") else "cli"
        return (
            (not status or run.status == status)
            and (not kind or run_kind == kind)
            and (not origin or run_origin == origin)
        )

    return [run for run in runs if keep(run)]


async def _runs(context: WebContext, access: ProjectAccess, request: Request) -> dict[str, Any]:
    query = request.query_params
    status, kind, origin = (query.get(k, "")[:40] for k in ("status", "kind", "origin"))
    runs = await context.db.read(
        list_runs,
        access.project_id,
        access.project_name,
        all_runs=True,
        limit=500,
        now=_now(context),
    )
    return {
        "runs": _filtered(runs, status, kind, origin),
        "filters": {"status": status, "kind": kind, "origin": origin},
        "statuses": sorted({r.status for r in runs}),
        "kinds": RUN_KINDS,
        "query": str(query),
    }


def add_run_pages(router: APIRouter, console: Console) -> None:
    _add_lists(router, console)
    _add_run(router, console)
    _add_run_live(router, console)


def _add_lists(router: APIRouter, console: Console) -> None:
    # The page, and its table alone (what the script fetches again every few seconds).
    for path, template in (("runs", "runs.html"), ("runs-table", "runs_table.html")):
        _add_list(router, console, path, template)


def _add_list(router: APIRouter, console: Console, path: str, template: str) -> None:
    @router.get(f"/console/p/{{project}}/{path}")
    async def runs(
        project: str, request: Request, context: WebContext = Depends(get_context)
    ) -> Response:
        async def body() -> Response:
            viewer = await console.viewer(request, context)
            access = await project_of(context, viewer, project)
            found = await _runs(context, access, request)
            return console.page(template, viewer, project=project, **found)

        return await console.guard(request, body)


def _add_run(router: APIRouter, console: Console) -> None:
    @router.get("/console/p/{project}/runs/{run_name}")
    async def run(
        project: str, run_name: str, request: Request, context: WebContext = Depends(get_context)
    ) -> Response:
        async def body() -> Response:
            viewer = await console.viewer(request, context)
            access = await project_of(context, viewer, project)
            found = await context.db.read(
                get_run, access.project_id, project, run_name, _now(context)
            )
            events = await context.db.read(
                list_events,
                access.project_id,
                project,
                limit=100,
                since=None,
                target_type="run",
                target_name=run_name,
            )
            log = await _log(context, access, run_name, 0, None)
            return console.page(
                "run.html",
                viewer,
                project=project,
                run=found,
                events=events,
                log=log,
                spec=json.dumps(
                    strip_nulls(found.run_spec.get("configuration") or {}), indent=2, sort_keys=True
                ),
                ports=_ports(found),
                charts=usage_charts(console.samples.of(_key(project, run_name))),
                attach=f"dockyard attach {run_name}",
            )

        return await console.guard(request, body)

    @router.post("/console/p/{project}/runs/{run_name}/stop")
    async def stop(
        project: str, run_name: str, request: Request, context: WebContext = Depends(get_context)
    ) -> Response:
        async def body() -> Response:
            viewer = await console.viewer(request, context)
            console.check_csrf(viewer, await console.form(request))
            access = await project_of(context, viewer, project)  # the API's stop: role user
            await context.db.read(get_run, access.project_id, project, run_name, _now(context))
            await context.controller.stop_run(project, run_name, abort=False)
            target = f"/console/p/{project}/runs/{run_name}"
            return RedirectResponse(target, status_code=303, headers=SECURITY_HEADERS)

        return await console.guard(request, body)


def _add_run_live(router: APIRouter, console: Console) -> None:
    @router.get("/console/p/{project}/runs/{run_name}/logs")
    async def logs(
        project: str,
        run_name: str,
        request: Request,
        offset: int = 0,
        context: WebContext = Depends(get_context),
    ) -> Response:
        async def body() -> Response:
            viewer = await console.viewer(request, context)
            access = await project_of(context, viewer, project)
            log = await _log(context, access, run_name, 0, max(offset, 0))
            return JSONResponse(log, headers=SECURITY_HEADERS)

        return await console.guard(request, body)

    @router.get("/console/p/{project}/runs/{run_name}/charts")
    async def charts(
        project: str, run_name: str, request: Request, context: WebContext = Depends(get_context)
    ) -> Response:
        async def body() -> Response:
            viewer = await console.viewer(request, context)
            access = await project_of(context, viewer, project)
            sample = await context.controller.sample_job(access.project_id, run_name)
            if sample is not None:
                console.samples.add(_key(project, run_name), sample)
            svg = "".join(usage_charts(console.samples.of(_key(project, run_name))))
            return HTMLResponse(svg, headers=SECURITY_HEADERS)

        return await console.guard(request, body)


def _key(project: str, run_name: str) -> str:
    return f"{project}/{run_name}"


async def _log(
    context: WebContext, access: ProjectAccess, run_name: str, job_num: int, offset: int | None
) -> dict[str, Any]:
    """The job's log from `offset` (None: its last 64 KiB), as text for the page."""
    ref = await context.db.read(find_job, access.project_id, run_name, 0, job_num)
    if ref.job_id is None:
        return {"text": "", "next_offset": offset or 0, "finished": True}
    path = job_log_path(context.settings.data_dir, access.project_name, ref.run_name, ref.job_id)
    size = await anyio.to_thread.run_sync(_size, path)
    start = max(size - LOG_WINDOW, 0) if offset is None else offset
    piece = await anyio.to_thread.run_sync(read_log, path, start, LOG_WINDOW)
    data = dropped_notice(piece.dropped) + piece.data if piece.dropped else piece.data
    finished = ref.run_status in ("done", "failed", "terminated", "aborted")
    return {
        "text": data.decode("utf-8", "replace"),
        "next_offset": piece.next_offset,
        "finished": finished,
        "start": start,
    }


def _size(path: Any) -> int:
    try:
        return int(path.stat().st_size)
    except OSError:
        return 0


def _ports(run: wire.Run) -> dict[str, Any]:
    configuration = run.run_spec.get("configuration") or {}
    ports = [str(p) for p in configuration.get("ports") or ()]
    if configuration.get("port") is not None:
        ports.append(str(configuration["port"]))
    return {"ports": ports, "url": run.service.url if run.service else None}


def usage_charts(samples: list[JobSample]) -> list[str]:
    def series(label: str, pick: Any) -> Series:
        return Series(label, [(s.timestamp, float(pick(s))) for s in samples])

    gpus = max((len(s.gpus) for s in samples), default=0)
    return [
        line_chart("CPU", "%", [series("cpu", lambda s: s.cpu_percent)]),
        line_chart("Memory", "bytes", [series("memory", lambda s: s.memory_bytes)]),
        line_chart(
            "GPU utilization",
            "%",
            [
                series(
                    f"gpu{i}",
                    lambda s, i=i: s.gpus[i].utilization_percent if i < len(s.gpus) else 0,
                )
                for i in range(gpus)
            ],
            y_max=100,
        ),
        line_chart(
            "GPU memory",
            "bytes",
            [
                series(
                    f"gpu{i}", lambda s, i=i: s.gpus[i].memory_used_bytes if i < len(s.gpus) else 0
                )
                for i in range(gpus)
            ],
        ),
    ]


async def project_costs(context: WebContext, access: ProjectAccess) -> dict[str, Any]:
    """$/h now, $ over the last day and week, and the $/h of each hour of the last day."""
    now = context.clock.now_ts()
    runs = await context.db.read(
        list_runs,
        access.project_id,
        access.project_name,
        all_runs=True,
        limit=1000,
        now=_now(context),
    )
    spends = [
        Spend(
            float(price),
            sub.submitted_at.timestamp(),
            sub.finished_at.timestamp() if sub.finished_at else None,
        )
        for run in runs
        for job in run.jobs
        for sub in job.job_submissions
        if (price := (sub.job_provisioning_data or {}).get("price"))
    ]
    hours = hourly_rates(spends, now, 24)
    return {
        "now": rate_at(spends, now),
        "day": cost_between(spends, now - 86400, now),
        "week": cost_between(spends, now - 7 * 86400, now),
        "chart": line_chart("Cost per hour, last day", "$/h", [Series("$/h", hours)]),
        "unpriced": sum(1 for r in runs if r.status == "running" and not r.cost),
    }
