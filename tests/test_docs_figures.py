"""Every performance figure in README.md and docs/ names the bench command that printed it.

A figure without its command cannot be rerun or checked, and reads as a promise. This
walks README.md and docs/**/*.md, cuts the prose into sentences, list items and table rows
(a table's header row counts for each of its rows, so a column or caption that names the
bench covers the table), and fails on any unit that holds a measured figure but names no
`bench/<name>.py`:

- a time in ms or µs, a rate (`runs/s`, `requests/s`, `rows/s`, `docs/s`, `MB/s`,
  `lines/s`), a ratio (a number with the multiplication sign, or `ratio 0.73`), a
  percentile (`p95 20 ms`);
- not a bound or a goal (`≤ 50 ms`, `at most 150 ms`, `at least 40 ms`), and not one of
  the settings below, which say what the code does rather than what it measured.

Code blocks are prose too (a command's comment may quote a figure).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_docs_references import documents

FIGURE = re.compile(
    r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:ms|µs)\b"
    r"|(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:runs|requests|req|rows|docs|documents|MB|lines)/s\b"
    r"|(?<![\w.])\d[\d,]*(?:\.\d+)?\u00d7"
    r"|\bp(?:50|95|99)\b\s*[\d(]"
    r"|\bratio\b\s+\d"
)
BOUND = re.compile(r"(?:≤|≥|<|>|\bat (?:most|least)|\bunder|\bwithin)\s*~?$")
BENCH = re.compile(r"\bbench/\w+\.py\b")
# settings the code has, quoted where the docs say what it does (not measurements)
SETTINGS = (
    "(then 10 ms later,",  # docs/agent.md: the events long-poll's gather delay
    "(and 10 ms more,",  # docs/contracts.md: the same delay
)
TABLE_RULE = re.compile(r"^\|[\s:|-]+\|\s*$")
SENTENCE_END = re.compile(r"(?<=[.!?;])\s+(?=[A-Z`*(])")
LIST_ITEM = re.compile(r"^\s*(?:[-*]|\d+\.)\s")


def units(text: str) -> Iterator[tuple[int, str]]:
    """(first line, text) of each sentence, list item's sentence, table row or code line."""
    paragraph: list[tuple[int, str]] = []

    def sentences() -> Iterator[tuple[int, str]]:
        if paragraph:
            joined = " ".join(line for _, line in paragraph)
            yield from ((paragraph[0][0], s) for s in SENTENCE_END.split(joined))
            paragraph.clear()

    header: str | None = None
    in_code = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            yield from sentences()
            in_code = not in_code
            continue
        if in_code:
            yield number, line
            continue
        if line.startswith("|"):
            yield from sentences()
            header = line if header is None else header
            if not TABLE_RULE.match(line):
                yield number, f"{line} {header}"
            continue
        header = None
        if not line.strip() or line.startswith("#") or LIST_ITEM.match(line):
            yield from sentences()
        if line.strip() and not line.startswith("#"):
            paragraph.append((number, line.strip()))
    yield from sentences()


def measured(unit: str) -> bool:
    """Whether `unit` states a measured figure (not a bound, a goal or a setting)."""
    for setting in SETTINGS:
        unit = unit.replace(setting, "")
    return any(not BOUND.search(unit[: match.start()]) for match in FIGURE.finditer(unit))


def unbacked(text: str) -> list[str]:
    return [
        f"line {number}: {unit[:160]}"
        for number, unit in units(text)
        if measured(unit) and not BENCH.search(unit)
    ]


@pytest.mark.parametrize("document", documents(), ids=lambda path: path.name)
def test_every_figure_names_its_bench(document: Path) -> None:
    problems = unbacked(document.read_text(encoding="utf-8"))
    assert not problems, (
        f"{document.name}: figures without the bench command that printed them (name it in "
        "the same sentence or table, or remove the figure):\n" + "\n".join(problems)
    )


def test_the_walk_finds_a_figure_without_its_bench() -> None:
    text = (
        "Measured with `bench/webhooks.py`: a push is answered in 7.7 ms. Twenty senders at\n"
        "once: 79 ms median. The goal is ≤ 50 ms, p50 at most 150 ms.\n"
        "\n"
        "| figure | value |\n"
        "|---|---|\n"
        "| claims | 3,070 rows/s |\n"
        "\n"
        "| figure (`bench/store.py`) | value |\n"
        "|---|---|\n"
        "| load | 24 ms |\n"
        "\n"
        "- a list item: 8.0\u00d7 faster\n"
        "- printed by `bench/parse.py`: 9,459 docs/s\n"
    )
    assert unbacked(text) == [
        "line 1: Twenty senders at once: 79 ms median.",
        "line 6: | claims | 3,070 rows/s | | figure | value |",
        "line 12: - a list item: 8.0\u00d7 faster",
    ]
