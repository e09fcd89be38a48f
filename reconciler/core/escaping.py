"""Names as text: how a name from a config repo or a client (a file path, a run, fleet or
volume name, an error quoting one) is shown, so that it can never act on what shows it
(pure).

Git allows any byte but NUL and `/` in a file name, and names of resources made outside
Git come from API clients. Shown raw, `\\x1b]8;;https://…\\x1b\\\\` (an OSC 8 link),
`\\x1b[2J` (clear the screen) or a newline would drive the reader's terminal, forge table
rows in `dockyard ps`, or break out of a list item or a table in a pull-request comment.

- `printable(text)`: every control, format, surrogate, private-use, unassigned and
  line/paragraph-separator character (Unicode categories C*, Zl, Zp — ESC, CR, LF, DEL,
  the C1 controls, bidi overrides such as U+202E) written as a Python-style escape (`\\n`,
  `\\x1b`, `\\u202e`); everything else is kept, so the name stays recognisable. The one
  escaping function: the CLI's tables (`cli.console.cell`) and the markdown below use it.
- `markdown_text(text)`: `printable`, then every character markdown or HTML could read
  (`< > & | \\` * _ [ ] ( ) ~ # ! \\ " '`) as a numeric character reference — no tag, link,
  emphasis, code span or table cell can start in it (GitHub and GitLab render these as
  the characters).
- `markdown_code(text)`: a name as inline code: a code span when that is safe (no
  backtick, `|` or escape needed), else `<code>` with `markdown_text` inside.

Called by `core.rendering_table`, `core.rendering_markdown`, `pr.commenting` and the CLI.
"""

from __future__ import annotations

import unicodedata

_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_MARKDOWN = frozenset("<>&|`*_[]()~#!\\\"'")


def _escaped(char: str) -> str:
    if char in _SHORT:
        return _SHORT[char]
    point = ord(char)
    if point < 0x100:
        return f"\\x{point:02x}"
    return f"\\u{point:04x}" if point < 0x10000 else f"\\U{point:08x}"


def _hidden(char: str) -> bool:
    category = unicodedata.category(char)
    return category[0] == "C" or category in ("Zl", "Zp")


def printable(text: str) -> str:
    """`text` with every character that is not plain text written as an escape."""
    if text.isprintable():  # the common case: nothing to do (no Cc/Cf/Z* but space)
        return text
    return "".join(_escaped(c) if _hidden(c) else c for c in text)


def markdown_text(text: str) -> str:
    """`printable(text)` that markdown and HTML read as plain characters only."""
    return "".join(f"&#{ord(c)};" if c in _MARKDOWN else c for c in printable(text))


def markdown_code(text: str) -> str:
    """`text` as inline code in markdown, inert whatever it holds."""
    shown = printable(text)
    if shown == text and not any(c in "`|" for c in text) and text.strip() == text and text:
        return f"`{text}`"
    return f"<code>{markdown_text(text)}</code>"
