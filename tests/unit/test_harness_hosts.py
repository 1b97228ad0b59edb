"""The harness's roots resolve the machine's own name from their /etc/hosts, as the machine does,
rather than asking a resolver that may not answer (each HTCondor daemon looks it up as it starts)."""

from __future__ import annotations

from pathlib import Path

from harness.rootfs import add_host, name_this_machine

ROOT_HOSTS = "127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n"
MACHINE_HOSTS = "127.0.0.1 localhost\n127.0.0.1 other\n127.0.0.1 vm # this machine\n"


def _root(tmp_path: Path, hosts: str = ROOT_HOSTS) -> Path:
    (tmp_path / "root" / "etc").mkdir(parents=True)
    (tmp_path / "root" / "etc" / "hosts").write_text(hosts)
    (tmp_path / "hosts").write_text(MACHINE_HOSTS)
    return tmp_path / "root"


def test_the_machines_lines_naming_it_are_added_once(tmp_path: Path) -> None:
    root = _root(tmp_path)
    assert name_this_machine(root, tmp_path / "hosts", "vm")
    assert (root / "etc/hosts").read_text() == ROOT_HOSTS + "127.0.0.1 vm # this machine\n"
    assert (root / "etc/hosts").stat().st_mode & 0o777 == 0o644
    assert not name_this_machine(root, tmp_path / "hosts", "vm")
    assert (root / "etc/hosts").read_text() == ROOT_HOSTS + "127.0.0.1 vm # this machine\n"
    assert sorted(p.name for p in (root / "etc").iterdir()) == ["hosts"]


def test_a_root_that_names_the_machine_or_a_machine_that_does_not_is_left_alone(tmp_path: Path) -> None:
    root = _root(tmp_path, ROOT_HOSTS + "10.0.0.1 vm.example.org vm\n")
    assert not name_this_machine(root, tmp_path / "hosts", "vm")
    assert not name_this_machine(root, tmp_path / "hosts", "elsewhere")
    assert not name_this_machine(root, tmp_path / "hosts", "machine")  # only in a comment
    assert (root / "etc/hosts").read_text() == ROOT_HOSTS + "10.0.0.1 vm.example.org vm\n"


def test_a_name_for_another_loopback_address_is_added_once(tmp_path: Path) -> None:
    root = _root(tmp_path)
    assert add_host(root, "podgahp-misnamed.test", "127.0.0.2")
    assert not add_host(root, "podgahp-misnamed.test", "127.0.0.2")
    assert (root / "etc/hosts").read_text() == ROOT_HOSTS + "127.0.0.2\tpodgahp-misnamed.test\n"
