"""Problems: every one reported, each with the exact line/column, field path, message, hint."""

from __future__ import annotations

import pytest

from schemas import ConfigError, Problem, parse_config


def problems(text: str | bytes) -> list[Problem]:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "x.dstack.yml")
    assert caught.value.problems, "a ConfigError always carries problems"
    return list(caught.value.problems)


def only(text: str | bytes) -> Problem:
    found = problems(text)
    assert len(found) == 1, found
    return found[0]


def test_unknown_key_points_at_the_key_with_a_hint() -> None:
    problem = only("type: task\nname: t1\ncomands: [echo]\nimage: x\n")
    assert (problem.line, problem.column, problem.field) == (3, 1, "comands")
    assert problem.message == "unknown field `comands`"
    assert problem.hint == "did you mean `commands`?"
    assert problem.path == "x.dstack.yml"


def test_nested_unknown_key_hint_comes_from_the_nested_model() -> None:
    problem = only("type: task\nimage: x\nresources:\n  gpu:\n    nam: A100\n")
    assert (problem.line, problem.column, problem.field) == (5, 5, "resources.gpu.nam")
    assert problem.hint == "did you mean `name`?"


def test_value_errors_point_at_the_value_inside_lists() -> None:
    problem = only(
        "type: service\nimage: x\nport: 80\nprobes:\n  - type: http\n    url: /ok\n"
        "  - type: http\n    url: nope\n"
    )
    assert (problem.line, problem.column, problem.field) == (8, 10, "probes[1].url")
    assert "must start with `/`" in problem.message


def test_every_problem_is_reported_in_order() -> None:
    found = problems(
        "type: task\nimage: x\nspot_policy: spott\nmax_duration: 5x\nresources:\n  gpu: 2..1\n"
    )
    assert [(p.line, p.field) for p in found] == [
        (3, "spot_policy"),
        (4, "max_duration"),
        (6, "resources.gpu"),
    ]
    assert found[0].hint == "did you mean `spot`?"


def test_cross_field_conflict_points_at_the_field() -> None:
    problem = only("type: task\nimage: ubuntu\npython: 3.11\n")
    assert (problem.line, problem.column, problem.field) == (3, 9, "python")
    assert "mutually exclusive" in problem.message


def test_missing_required_field_names_it() -> None:
    problem = only("type: service\nname: s1\ncommands: [x]\n")
    assert problem.field == "port"
    assert problem.message == "missing required field `port`"
    assert problem.line == 1


def test_commands_or_image() -> None:
    problem = only("type: task\nname: t1\n")
    assert problem.field == "commands"
    assert "either `commands` or `image`" in problem.message


def test_duplicate_keys_are_errors_stricter_than_dstack() -> None:
    problem = only("type: task\ncommands: [a]\nimage: x\ncommands: [b]\n")
    assert (problem.line, problem.column, problem.field) == (4, 1, "commands")
    assert "duplicate key" in problem.message and "dstack" in problem.message


def test_duplicate_keys_and_validation_problems_together() -> None:
    found = problems("type: task\nimage: x\nimage: y\nnodes: 0\n")
    assert [(p.line, p.field) for p in found] == [(3, "image"), (4, "nodes")]


def test_tab_indentation() -> None:
    problem = only("type: task\ncommands:\n\t- echo\n")
    assert problem.line == 3
    assert "tab" in problem.message and problem.hint is not None


def test_yaml_syntax_error_has_a_line() -> None:
    problem = only("type: task\ncommands: [a, b\nimage: x\n")
    assert problem.line >= 2 and problem.message.startswith("invalid YAML")


def test_multi_document_files() -> None:
    problem = only("type: task\nimage: x\n---\ntype: task\nimage: y\n")
    assert problem.line == 3
    assert "multi-document" in problem.message


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "empty"), ("- a\n- b\n", "a list, not a mapping"), ("just text\n", "a str")],
)
def test_non_mapping_documents(text: str, message: str) -> None:
    problem = only(text)
    assert message in problem.message
    assert problem.hint is not None and "type" in problem.hint


def test_missing_and_unknown_type() -> None:
    assert only("name: x\nimage: y\n").field == "type"
    problem = only("type: servise\nimage: x\n")
    assert (problem.line, problem.column) == (1, 7)
    assert problem.hint == "did you mean `service`?"


def test_unknown_volume_backend() -> None:
    problem = only("type: volume\nname: v1\nbackend: azure\n")
    assert (problem.line, problem.field) == (3, "backend")


def test_invalid_utf8() -> None:
    problem = only(b"type: task\nimage: \xff\n")
    assert problem.line == 2 and "UTF-8" in problem.message


def test_name_pattern_message_is_readable() -> None:
    problem = only("type: task\nname: My_Task\nimage: x\n")
    assert (problem.line, problem.column) == (2, 7)
    assert "lowercase" in problem.message


def test_shorthand_errors_point_at_the_shorthand_value() -> None:
    problem = only("type: task\nimage: x\nvolumes:\n  - data:/ok\n  - name:relative\n")
    assert (problem.line, problem.column, problem.field) == (5, 5, "volumes[1]")


def test_problem_format() -> None:
    problem = Problem("a.yml", 3, 1, "comands", "unknown field `comands`", "did you mean?")
    assert problem.format() == "a.yml:3:1: comands: unknown field `comands` (did you mean?)"
    assert str(ConfigError([problem])) == problem.format()


def test_field_of_another_type_says_which_types_have_it() -> None:
    problem = only("type: dev-environment\nide: vscode\ncommands: [x]\n")
    assert problem.hint == "`commands` is a field of: task, service"


def test_non_string_key_points_at_the_key() -> None:
    problem = only("type: task\n1: 2\nimage: x\n")
    assert (problem.line, problem.column) == (2, 1)


@pytest.mark.parametrize("value", [".inf", ".nan", "-.inf"])
def test_non_finite_numbers_are_rejected(value: str) -> None:
    problem = only(f"type: task\nimage: x\nmax_price: {value}\n")
    assert problem.field == "max_price" and "finite" in problem.message
