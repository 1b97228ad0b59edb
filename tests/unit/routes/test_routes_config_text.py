"""Where statements of a configuration file begin and end, grouped as HTCondor's reader groups lines."""

from __future__ import annotations

from typing import List, Tuple

import pytest

from gahp.routes.config_text import statement_at, statements

FILE = """\
# a comment that ends in a backslash does not continue \\
KNOB_A = 1
KNOB_B = two \\
   lines
  # indented comment
JOB_ROUTER_ROUTE_X @=jrt
  # a comment inside the block
  SET Foo 1
  include : /not/a/statement/here
@jrt
include ifexist : /etc/other.conf
@include command : echo X = 1
use role : personal
if defined KNOB_A
  TOOL.LOCAL_CONFIG_FILE = /bin/true |
else
  KNOB_C += more
endif
error : stop here
KNOB_D = a \\
# commented continuation line \\
   b
no operator here
[ini section]
JOB_ROUTER_ROUTE_Y @=end
  never closed
"""


def shape() -> List[Tuple[str, str, int, int, str, str]]:
    return [(s.kind, s.name, s.first + 1, s.last + 1, s.words, s.rhs) for s in statements(FILE.splitlines())]


def test_statements_and_their_lines() -> None:
    assert shape() == [
        ("assign", "KNOB_A", 2, 2, "", "1"),
        ("assign", "KNOB_B", 3, 4, "", "two lines"),
        ("block", "JOB_ROUTER_ROUTE_X", 6, 10, "", "jrt"),
        ("include", "include", 11, 11, "ifexist", "/etc/other.conf"),
        ("include", "include", 12, 12, "command", "echo X = 1"),
        ("use", "use", 13, 13, "role", "personal"),
        ("if", "if", 14, 14, "", "if defined KNOB_A"),
        ("assign", "TOOL.LOCAL_CONFIG_FILE", 15, 15, "", "/bin/true |"),
        ("if", "else", 16, 16, "", "else"),
        ("assign", "KNOB_C", 17, 17, "", "more"),
        ("if", "endif", 18, 18, "", "endif"),
        ("message", "error", 19, 19, "", "stop here"),
        ("assign", "KNOB_D", 20, 22, "", "a b"),
        ("bad", "no", 23, 23, "operator here", ""),
        ("bad", "JOB_ROUTER_ROUTE_Y", 25, 26, "", "end"),
    ]


def test_knob_drops_the_subsystem_prefix() -> None:
    found = {s.name: s for s in statements(FILE.splitlines())}
    assert found["TOOL.LOCAL_CONFIG_FILE"].knob == "LOCAL_CONFIG_FILE"
    assert found["JOB_ROUTER_ROUTE_X"].knob == "JOB_ROUTER_ROUTE_X"
    assert found["include"].knob == ""


@pytest.mark.parametrize("line, name", [(7, "JOB_ROUTER_ROUTE_X"), (10, "JOB_ROUTER_ROUTE_X"), (4, "KNOB_B"),
                                        (1, None), (5, None)])
def test_statement_at_a_line(line: int, name: str) -> None:
    found = statement_at(statements(FILE.splitlines()), line - 1)
    assert (found.name if found else None) == name
