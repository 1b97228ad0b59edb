"""Where the statements of an HTCondor configuration file begin and end, as lines.

HTCondor itself reads every value (``condor_config_val``, ``condor_job_router_info``): this module
never interprets one. It only finds, the way HTCondor's reader groups lines (``\\`` continuations,
``#`` comments, ``NAME @=tag`` ... ``@tag`` blocks, ``if``/``else``), which lines make up each
statement and what kind it is, so that

* :mod:`gahp.routes.sources` can find, before HTCondor sees a file, the statements that would run
  a program or read other sources (``include``, ``LOCAL_CONFIG_FILE``, ...) and replace them line
  for line, keeping every other line where it was (so HTCondor's ``file, line N`` still points at
  the admin's own line);
* :mod:`gahp.routes.convert` can replace the lines of one assignment and keep the rest of a file.

The grouping follows HTCondor's ``getline`` (``src/condor_utils/config.cpp``): surrounding
whitespace is dropped; a line ending in ``\\`` continues on the next one, unless the statement's
first line is a comment; a comment line inside a continuation keeps only its last character.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

#: Keywords of conditional lines (HTCondor's ``ConfigIfStack``).
_IF_WORDS = ("if", "elif", "else", "endif")
_NAME_END = re.compile(r"[\s=:]")


@dataclass(frozen=True)
class Statement:
    """One statement of a configuration file.

    ``kind`` is ``assign`` (``NAME = value``, ``NAME += value``, the obsolete ``NAME : value``),
    ``block`` (``NAME @=tag`` ... ``@tag``), ``include``, ``use``, ``message`` (``error :`` /
    ``warning :``), ``if`` (``if``/``elif``/``else``/``endif``) or ``bad`` (no operator: HTCondor
    rejects the file there). ``first`` and ``last`` are 0-based line indexes (for a block, ``last``
    is its closing ``@tag`` line). ``words`` are the words between the name and the operator
    (``include ifexist command : ...``), ``rhs`` the text after the operator on the statement's first
    logical line (the tag of a block).
    """

    kind: str
    name: str
    first: int
    last: int
    words: str = ""
    rhs: str = ""

    @property
    def knob(self) -> str:
        """The assigned name without a ``SUBSYS.`` prefix, upper case ('' for other kinds)."""
        if self.kind not in ("assign", "block"):
            return ""
        return self.name.rsplit(".", 1)[-1].upper()


def _logical_lines(lines: Sequence[str]) -> List[Tuple[int, int, str]]:
    """(first, last, text) of each logical line, comments and blank lines included."""
    out: List[Tuple[int, int, str]] = []
    i = 0
    while i < len(lines):
        first = i
        text = lines[i].strip()
        comment = text.startswith("#")
        parts: List[str] = []
        while text.endswith("\\") and not (comment and i == first) and i + 1 < len(lines):
            parts.append(text[:-1])
            i += 1
            text = lines[i].strip()
            if text.startswith("#"):
                text = text[-1:]
        if text.endswith("\\") and not (comment and i == first):
            text = text[:-1]
        parts.append(text)
        out.append((first, i, "".join(parts)))
        i += 1
    return out


def _head(text: str) -> Tuple[str, str, str, str]:
    """(name, words before the operator, operator, rhs) of a statement line; operator '' if none."""
    match = _NAME_END.search(text)
    if match is None:
        return text, "", "", ""
    name, rest = text[:match.start()], text[match.start():]
    stripped = rest.lstrip()
    words = ""
    if stripped[:1] not in ("=", ":"):
        found = re.search(r"@=|\+[^=\s]{0,2}=|[=:]", stripped)
        if found is None:
            return name, stripped, "", ""
        words, stripped = stripped[:found.start()].strip(), stripped[found.start():]
    op = re.match(r"@=|\+[^=\s]{0,2}=|[=:]", stripped)
    assert op is not None
    return name, words, op.group(0), stripped[op.end():].strip()


def statements(lines: Sequence[str]) -> List[Statement]:
    """Every statement of a file given as lines (comments, blank lines and the body of blocks are
    part of no statement except their block)."""
    found: List[Statement] = []
    block: Optional[Tuple[str, int, str, str]] = None  # name, first line, words, tag
    for first, last, text in _logical_lines(lines):
        if not text or text.startswith("#"):
            continue
        if block is not None:
            if text == "@" + block[3]:
                found.append(Statement("block", block[0], block[1], last, block[2], block[3]))
                block = None
            continue
        word = re.split(r"\s", text.lstrip(":"), maxsplit=1)[0]
        if word in _IF_WORDS:
            found.append(Statement("if", word, first, last, rhs=text))
            continue
        name, words, op, rhs = _head(text)
        keyword = name[1:] if name.startswith("@") else name
        if op == ":" and keyword.lower() in ("include", "use", "error", "warning"):
            kind = {"include": "include", "use": "use"}.get(keyword.lower(), "message")
            found.append(Statement(kind, keyword.lower(), first, last, words, rhs))
        elif op == "@=":
            block = (name, first, words, rhs.split()[0] if rhs.split() else "")
        elif op:
            found.append(Statement("assign", name, first, last, words, rhs))
        elif not text.startswith("["):
            found.append(Statement("bad", name, first, last, words, rhs))
    if block is not None:
        found.append(Statement("bad", block[0], block[1], len(lines) - 1, block[2], block[3]))
    return found


def statement_at(found: Sequence[Statement], line: int) -> Optional[Statement]:
    """The statement that spans 0-based ``line``, if any."""
    for statement in found:
        if statement.first <= line <= statement.last:
            return statement
    return None
