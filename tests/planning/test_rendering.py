"""The three renderings of a plan: JSON (documented shape), markdown (PR comment), table."""

from __future__ import annotations

from rich.console import Console

from reconciler.core.planning import plan
from reconciler.core.rendering_json import to_json_dict
from reconciler.core.rendering_markdown import MARKDOWN_LIMIT, render_markdown
from reconciler.core.rendering_table import render_table
from reconciler.domain.desired import DesiredResource
from reconciler.domain.issues import ConfigIssue
from reconciler.domain.observed import ObservedState
from reconciler.domain.plan import Plan
from tests.planning.factories import POLICY, deployed, live, resource, state

OLD = resource("type: service\nname: web\nimage: nginx\nport: 80\n")
NEW = resource("type: service\nname: web\nimage: nginx:2\nport: 80\nauth: false\n")
VOL = resource("type: volume\nname: data\nbackend: aws\nregion: us-east-1\nsize: 10GB\n")
VOL2 = resource("type: volume\nname: data\nbackend: aws\nregion: us-east-1\nsize: 20GB\n")
TASK = resource("type: task\nname: train\ncommands: [python train.py]\n")


def sample_plan() -> Plan:
    observed = live(deployed(OLD), deployed(VOL), deployed(TASK))
    return plan(state(NEW, VOL2, commit="a" * 40), observed, POLICY, base="b" * 40)


def test_json_has_exactly_the_documented_shape() -> None:
    data = to_json_dict(sample_plan())
    assert list(data) == ["commit", "base", "errors", "actions", "summary"]
    assert data["commit"] == "a" * 40 and data["base"] == "b" * 40
    assert data["summary"] == {
        "create": 0, "update": 0, "replace": 2, "delete": 1,
        "retain": 0, "noop": 0, "blocked": 0,
    }  # fmt: skip
    for action in data["actions"]:
        assert list(action) == ["action", "kind", "name", "project", "path", "reason", "fields"]
        for field in action["fields"]:
            assert list(field) == ["field", "old", "new"]
    web = next(a for a in data["actions"] if a["name"] == "web")
    assert {"field": "image", "old": "nginx", "new": "nginx:2"} in web["fields"]


def test_json_errors_have_the_documented_shape() -> None:
    issue = ConfigIssue("x.dstack.yml", 2, 3, "port", "bad port")
    result = plan(
        state(NEW).__class__(project="main", commit="c", issues=(issue,)),
        ObservedState("main"),
        POLICY,
    )
    data = to_json_dict(result)
    assert data["errors"] == [
        {"path": "x.dstack.yml", "line": 2, "column": 3, "field": "port", "message": "bad port"}
    ]
    assert data["actions"] == []


def test_markdown_puts_the_summary_first_and_one_details_block_per_change() -> None:
    text = render_markdown(sample_plan())
    lines = text.splitlines()
    assert lines[0] == f"### Dockyard plan for `{'a' * 12}` against `{'b' * 12}`"
    assert lines[2] == "**2 replace, 1 delete**"
    assert "⚠️ destroys data: volume `data` (replace)" in text
    assert text.count("<details>") == 3
    assert "| `image` | <code>&quot;nginx&quot;</code> | <code>&quot;nginx:2&quot;</code> |" in text
    assert "Truncated" not in text


def test_markdown_lists_errors_in_the_summary() -> None:
    issue = ConfigIssue("x.dstack.yml", 2, 3, "port", "bad <port>")
    result = Plan(commit="c" * 40, base=None, errors=(issue,))
    text = render_markdown(result)
    assert "1 error(s): nothing will be applied" in text
    assert "- x.dstack.yml:2:3 [port]: bad &lt;port&gt;" in text


def test_markdown_stays_under_the_limit_and_says_how_much_was_left_out() -> None:
    def job(i: int, command: str) -> DesiredResource:
        return resource(f"type: task\nname: job-{i}\ncommands: ['{command * 400}']\n")

    old = live(*(deployed(job(i, "y")) for i in range(200)))
    result = plan(state(*(job(i, "x") for i in range(200))), old, POLICY)
    text = render_markdown(result)
    assert len(text) < MARKDOWN_LIMIT
    assert "✂️ Truncated:" in text
    shown = text.count("<details>")
    assert f"{len(result.actions) - shown} more block(s)" in text
    small = render_markdown(result, limit=5_000)
    assert len(small) < 5_000 and "Truncated" in small


def test_table_shows_colored_field_diffs() -> None:
    console = Console(record=True, width=160, force_terminal=True, color_system="standard")
    console.print(render_table(sample_plan()))
    plain = console.export_text(clear=False)
    assert 'image: "nginx" → "nginx:2"' in plain
    assert "replace" in plain and "⚠ data" in plain
    assert "2 replace, 1 delete" in plain
    styled = console.export_text(styles=True)
    assert '\x1b[31m"nginx"' in styled  # old value red
    assert '\x1b[32m"nginx:2"' in styled  # new value green


def test_table_shows_errors() -> None:
    result = Plan(commit="c" * 40, base=None, errors=(ConfigIssue("x.yml", 4, 1, "f", "boom"),))
    console = Console(record=True, width=120)
    console.print(render_table(result))
    plain = console.export_text()
    assert "x.yml:4:1" in plain and "boom" in plain and "1 error(s)" in plain


def test_table_lists_unchanged_resources_as_aligned_lines_after_the_table() -> None:
    other = resource("type: task\nname: evaluate-long-name\ncommands: [python eval.py]\n")
    observed = live(deployed(OLD), deployed(TASK), deployed(other))
    result = plan(state(NEW, TASK, other, commit="a" * 40), observed, POLICY, base="b" * 40)
    console = Console(record=True, width=160)
    console.print(render_table(result))
    lines = console.export_text().splitlines()
    start = lines.index("2 unchanged:")
    assert lines[start + 1 : start + 3] == [
        "  task  evaluate-long-name  up to date",
        "  task  train               up to date",
    ]
    in_table = [line for line in lines[:start] if line.startswith("│")]
    assert any("web" in line for line in in_table)  # the change is a row of the table
    assert not any("train" in line or "evaluate" in line for line in in_table)
    assert not any("up to date" in line for line in in_table)
