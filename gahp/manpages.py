"""Manual pages of podgahp's programs, rendered from their own help (the RPM builds them).

``podgahp.1`` comes from the click commands (each subcommand with its usage, help and options),
``k8s_gahp.1`` and ``lancium_gahp.1`` from the GAHP programs' ``--help`` text: what ``man`` shows is
what ``--help`` says.  Commands that other packages add to ``podgahp`` (``sim``) are left out.

    python -m gahp.manpages DIRECTORY
"""

from __future__ import annotations

import inspect
import os
import sys
from typing import List, Optional, Sequence

import click

from gahp import __version__
from gahp.core import plugins

#: (program, backend, knob) of the GAHP programs, one for each backend of the registry that has one.
GAHP_PROGRAMS = tuple((f"{name}_gahp", name, f"{name.upper()}_GAHP") for name in plugins.programs())


def _escape(text: str) -> str:
    """Text as troff reads it literally: backslashes and hyphens escaped, no line taken for a request."""
    lines = []
    for line in text.replace("\\", "\\e").replace("-", "\\-").splitlines():
        lines.append("\\&" + line if line.startswith((".", "'")) else line)
    return "\n".join(lines)


def _paragraphs(text: str) -> str:
    """Help text as man paragraphs; an indented block (an example) stays as written."""
    out: List[str] = []
    for block in inspect.cleandoc(click.unstyle(text)).split("\n\n"):
        if not block.strip():
            continue
        if all(line.startswith("  ") or not line.strip() for line in block.splitlines()[1:]) and \
                any(line.startswith("  ") for line in block.splitlines()):
            out.append(".PP\n.nf\n%s\n.fi" % _escape(block))
        else:
            out.append(".PP\n%s" % _escape(" ".join(block.split())))
    return "\n".join(out)


def _header(program: str, summary: str) -> str:
    return ('.TH %s 1 "" "podgahp %s" "User Commands"\n.SH NAME\n%s \\- %s\n'
            % (program.upper(), __version__, _escape(program), _escape(summary.rstrip("."))))


def _options(command: click.Command, ctx: click.Context, with_help: bool = True) -> str:
    out = []
    for param in command.get_params(ctx):
        if param.name == "help" and not with_help:  # said once, in OPTIONS
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, help_text = record
        out.append('.TP\n.B "%s"\n%s' % (_escape(names), _escape(" ".join(help_text.split())) or "\\&"))
    return "\n".join(out)


def command_page(group: click.Group, program: str, own_module: str = "gahp") -> str:
    """The page of a click group: its help and options, then each of its commands (and theirs) whose
    code is in ``own_module``."""
    ctx = click.Context(group, info_name=program, **group.context_settings)
    page = [_header(program, (group.help or "").split("\n", 1)[0].split(": ", 1)[-1]),
            ".SH SYNOPSIS\n.B %s\n%s" % (_escape(program), _escape(" ".join(group.collect_usage_pieces(ctx)))),
            ".SH DESCRIPTION\n" + _paragraphs((group.help or "").split("\n", 1)[-1]),
            ".SH OPTIONS\n" + _options(group, ctx), ".SH COMMANDS"]

    def add(command: click.Command, parent: click.Context, name: str) -> None:
        callback_module = getattr(command.callback, "__module__", "") or ""
        if not (callback_module == own_module or callback_module.startswith(own_module + ".")):
            return
        sub = click.Context(command, info_name=name, parent=parent)
        usage = " ".join([sub.command_path] + command.collect_usage_pieces(sub))
        page.append('.SS "%s"\n%s' % (_escape(usage), _paragraphs(command.help or "")))
        options = _options(command, sub, with_help=False)
        if options:
            page.append(options)
        if isinstance(command, click.Group):
            for child in sorted(command.list_commands(sub)):
                found = command.get_command(sub, child)
                if found is not None and not found.hidden:
                    add(found, sub, child)

    for name in sorted(group.list_commands(ctx)):
        command = group.get_command(ctx, name)
        if command is not None and not command.hidden:
            add(command, ctx, name)
    return "\n".join(page) + "\n"


def gahp_page(program: str, backend: str, knob: str) -> str:
    """The page of a GAHP program, from its ``--help`` text."""
    from gahp.cli import gahp_help

    text = gahp_help(program, backend, knob)
    usage, _, rest = text.partition("\n\n")
    summary = 'the GAHP server for GridResource = "batch %s"' % backend
    return "\n".join([_header(program, summary), ".SH SYNOPSIS\n" + _escape(usage.replace("usage: ", "", 1)),
                      ".SH DESCRIPTION\n" + _paragraphs(rest)]) + "\n"


def write_pages(directory: str) -> List[str]:
    """Write every page into ``directory``; returns their paths."""
    from gahp.cli import main

    os.makedirs(directory, exist_ok=True)
    pages = {"podgahp": command_page(main, "podgahp")}
    for program, backend, knob in GAHP_PROGRAMS:
        pages[program] = gahp_page(program, backend, knob)
    written = []
    for program, text in pages.items():
        path = os.path.join(directory, program + ".1")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        written.append(path)
    return written


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        sys.stderr.write("usage: python -m gahp.manpages DIRECTORY\n")
        return 2
    for path in write_pages(args[0]):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
