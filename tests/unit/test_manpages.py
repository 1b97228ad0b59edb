"""Man pages rendered from the programs' own help."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import click

from gahp import manpages
from gahp.core import plugins
from gahp.cli import gahp_help, main


def test_every_podgahp_command_and_option_is_on_the_page(tmp_path: Path) -> None:
    written = manpages.write_pages(str(tmp_path))
    assert sorted(Path(p).name for p in written) == sorted([f"{b}_gahp.1" for b in plugins.programs()] + ["podgahp.1"])
    assert {"k8s", "lancium"} <= set(plugins.programs())
    page = (tmp_path / "podgahp.1").read_text()
    ctx = click.Context(main, info_name="podgahp")
    for name in main.list_commands(ctx):
        command = main.get_command(ctx, name)
        assert command is not None
        if command.callback is not None and not command.callback.__module__.startswith("gahp"):
            assert f"podgahp {name}" not in page  # another package's command (sim)
            continue
        assert f'.SS "podgahp {name}' in page, name
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("--") and not getattr(param, "hidden", False):
                    assert opt.replace("-", "\\-") in page, (name, opt)


def test_gahp_pages_say_what_help_says(tmp_path: Path) -> None:
    manpages.write_pages(str(tmp_path))
    page = (tmp_path / "k8s_gahp.1").read_text()
    assert page.startswith('.TH K8S_GAHP 1 "" "podgahp ')
    for line in gahp_help("k8s_gahp", "k8s", "K8S_GAHP").splitlines()[1:]:
        for word in line.split():
            assert word.replace("\\", "\\e").replace("-", "\\-") in page, word


def test_text_is_taken_literally() -> None:
    assert manpages._escape(".TH not a request\n'neither\na-b \\ c") == \
        "\\&.TH not a request\n\\&'neither\na\\-b \\e c"


def test_pages_render_without_warnings(tmp_path: Path) -> None:
    assert shutil.which("man"), "man not found: `make system-deps` installs man-db"
    for path in manpages.write_pages(str(tmp_path)):
        shown = subprocess.run(["man", "--warnings", "-l", path], capture_output=True, text=True, timeout=60,
                               env={"MANWIDTH": "100", "PATH": "/usr/bin:/bin"})
        assert shown.returncode == 0 and shown.stderr == "", shown.stderr
        assert "DESCRIPTION" in shown.stdout
