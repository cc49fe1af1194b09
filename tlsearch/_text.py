"""Text that came from a store, made safe for a terminal and a spreadsheet; names checked before they are stored.

`printable` is the one place control characters are escaped: every value from the store that is printed (commands,
the progress line, error lines, logs) passes through it. `csv_cell` keeps a CSV cell from starting a formula.
`name_problem` says what is wrong with a study name, for the command line and `StudySpec` alike.
"""

from __future__ import annotations

import re

# Bidirectional overrides, embeddings, isolates and marks: they reorder what a terminal shows.
_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
# C0 (newline and tab included: a value is one cell or one line), DEL, C1, bidi controls, lone surrogates.
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}\ud800-\udfff]")
_UNSAFE_KEEPING_NEWLINES = re.compile(f"[\x00-\x09\x0b-\x1f\x7f-\x9f{_BIDI}\ud800-\udfff]")
# OWASP "CSV injection": a cell starting with one of these is read as a formula by spreadsheets.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(value: object, *, keep_newlines: bool = False) -> str:
    """`str(value)` with every control character (C0, DEL, C1), bidi control and lone surrogate written as
    `\\xNN` / `\\uNNNN`, so a terminal shows it and does not obey it. `keep_newlines` keeps line breaks (for text
    of several lines, such as a log record with its traceback)."""
    pattern = _UNSAFE_KEEPING_NEWLINES if keep_newlines else _UNSAFE
    return pattern.sub(_escape, str(value))


def csv_cell(value: object) -> object:
    """A CSV cell that no spreadsheet runs: text starting with `= + - @`, tab or CR gets a leading `'` (OWASP's
    advice) and its control characters escaped; numbers, including negative ones, stay numbers."""
    if not isinstance(value, str):
        return value
    if value.startswith(_FORMULA_START) and not _is_number(value):
        value = "'" + value
    return printable(value)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def name_problem(name: object) -> str | None:
    """What is wrong with `name` as a study name (None when nothing): it must be a non-empty string without
    surrounding spaces, control characters, bidi controls or lone surrogates."""
    if not isinstance(name, str) or name == "":
        return "must be a non-empty string"
    if name.strip() != name:
        return "must not start or end with spaces"
    unsafe = _UNSAFE.search(name)
    if unsafe:
        return f"must not hold control, bidi or surrogate characters (found {_escape(unsafe)})"
    return None
