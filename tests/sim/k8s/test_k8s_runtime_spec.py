"""What the real-container runtime makes of a pod spec, without running anything: ``$(VAR)``
expansion, command over the image's entrypoint, users and the runAsNonRoot refusal, capabilities and
cgroup limits, the kubelet's atomic writer of Secret volumes, and image directories."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict

import pytest

from podgahp_sim.k8s.envvars import ContainerConfigError, command_line, container_environment, expand
from podgahp_sim.k8s.oci import capabilities, resolve_user, resources, runtime_config
from podgahp_sim.k8s.registry import ImageError, Image, load_image, parse_image_argument
from podgahp_sim.k8s.volumes import DATA_LINK, AtomicDir, owner_mode


@pytest.mark.parametrize("text, expected", [
    ("$(A)", "a"), ("x$(A)y", "xay"), ("$$(A)", "$(A)"), ("$(MISSING)", "$(MISSING)"), ("$(A", "$(A"),
    ("$", "$"), ("$$", "$"), ("$(A)$(B)", "ab"),
], ids=["var", "inside", "escaped", "undefined kept", "unclosed", "lone dollar", "double dollar", "two"])
def test_expansion(text: str, expected: str) -> None:
    assert expand(text, {"A": "a", "B": "b"}) == expected


def test_command_replaces_entrypoint_and_args_replace_cmd() -> None:
    image = Image("i", ("/",), entrypoint=("/entry",), cmd=("default",))
    env = {"X": "x"}
    assert command_line({}, image, env) == ["/entry", "default"]
    assert command_line({"args": ["$(X)"]}, image, env) == ["/entry", "x"]
    assert command_line({"command": ["/bin/sh"]}, image, env) == ["/bin/sh"]
    assert command_line({"command": ["/bin/sh"], "args": ["-c", "$(X)"]}, image, env) == ["/bin/sh", "-c", "x"]


def _image(tmp_path: Path, user: str = "") -> Image:
    (tmp_path / "etc").mkdir(exist_ok=True)
    (tmp_path / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\npilot:x:1000:1000::/home/pilot:/bin/sh\n")
    (tmp_path / "etc/group").write_text("root:x:0:\npilot:x:1000:\nvideo:x:44:pilot\n")
    return Image("i", (str(tmp_path),), user=user)


def _pod(**security: Any) -> Dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"securityContext": security}}


def test_users_from_the_image_and_the_security_context(tmp_path: Path) -> None:
    named = _image(tmp_path, "pilot")
    assert resolve_user(_pod(), {}, named) == resolve_user(_pod(), {}, _image(tmp_path, "1000"))
    user = resolve_user(_pod(), {}, named)
    assert (user.uid, user.gid, user.groups) == (1000, 1000, (44,))
    user = resolve_user(_pod(runAsUser=5, runAsGroup=6, supplementalGroups=[7], fsGroup=8), {}, named)
    assert (user.uid, user.gid, user.groups) == (5, 6, (7, 8))
    user = resolve_user(_pod(runAsUser=5), {"securityContext": {"runAsUser": 9}}, named)
    assert user.uid == 9


@pytest.mark.parametrize("image_user, security, message", [
    ("", {"runAsNonRoot": True}, "container has runAsNonRoot and image will run as root"),
    ("pilot", {"runAsNonRoot": True}, "image has non-numeric user (pilot)"),
    ("1000", {"runAsNonRoot": True, "runAsUser": 0}, "container's runAsUser breaks non-root policy"),
], ids=["root image", "named user", "runAsUser 0"])
def test_run_as_non_root_refuses_root(tmp_path: Path, image_user: str, security: Dict[str, Any],
                                      message: str) -> None:
    with pytest.raises(ContainerConfigError) as caught:
        resolve_user(_pod(**security), {}, _image(tmp_path, image_user))
    assert caught.value.reason == "CreateContainerConfigError" and message in caught.value.message
    assert '(pod: "p_ns(u)", container: None)' in caught.value.message


def test_capabilities() -> None:
    default = capabilities({}, {})
    assert "CAP_CHOWN" in default and "CAP_SYS_ADMIN" not in default
    assert capabilities({}, {"securityContext": {"capabilities": {"drop": ["ALL"], "add": ["NET_RAW"]}}}) == [
        "CAP_NET_RAW"]
    assert "CAP_KILL" not in capabilities({}, {"securityContext": {"capabilities": {"drop": ["KILL"]}}})
    assert "CAP_SYS_ADMIN" in capabilities({}, {"securityContext": {"privileged": True}})


def test_limits_become_cgroup_limits() -> None:
    spec = resources({"resources": {"limits": {"cpu": "1500m", "memory": "2Gi"}, "requests": {"cpu": "500m"}}}, 10)
    assert spec["memory"] == {"limit": 2 * 2 ** 30}
    assert spec["cpu"] == {"shares": 512, "quota": 150000, "period": 100000}
    assert spec["pids"] == {"limit": 10}
    assert resources({}, 0)["cpu"] == {"shares": 2} and "memory" not in resources({}, 0)


def test_runtime_config_host_network_and_read_only_root(tmp_path: Path) -> None:
    image = _image(tmp_path, "1000")
    container = {"name": "c", "workingDir": "/w", "securityContext": {"readOnlyRootFilesystem": True,
                                                                      "allowPrivilegeEscalation": False}}
    config = runtime_config(_pod(), container, image, argv=["/bin/true"], env={"A": "1"},
                            user=resolve_user(_pod(), container, image), mounts=[], cgroups_path="x/y",
                            pids_limit=0)
    assert {n["type"] for n in config["linux"]["namespaces"]} == {"pid", "ipc", "uts", "mount"}
    assert config["root"] == {"path": "rootfs", "readonly": True}
    assert config["process"]["noNewPrivileges"] is True and config["process"]["cwd"] == "/w"
    assert config["process"]["env"] == ["A=1"] and config["hostname"] == "p"
    with pytest.raises(ContainerConfigError):
        runtime_config(_pod(), container, image, argv=[], env={}, user=resolve_user(_pod(), container, image),
                       mounts=[], cgroups_path="x", pids_limit=0)


def test_environment_resolves_references() -> None:
    secrets = {("secrets", "ns", "s"): {"data": {"k": "dmFsdWU="}}, ("configmaps", "ns", "c"): {"data": {"K": "v"}}}
    pod = _pod()
    pod["spec"]["nodeName"] = "n1"
    container = {"name": "c", "resources": {"limits": {"memory": "64Mi"}}, "envFrom": [{"configMapRef": {"name": "c"},
                                                                                       "prefix": "P_"}],
                 "env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                         {"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                         {"name": "M", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory",
                                                                          "divisor": "1Mi"}}},
                         {"name": "J", "value": "$(S)-$(P_K)"},
                         {"name": "O", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k", "optional": True}}}]}
    env = container_environment(pod, container, Image("i", ("/",)), lambda *key: secrets.get(key),
                                service=("127.0.0.1", 6443), pod_ip="10.0.0.1", host_ip="10.0.0.2", allocatable={})
    assert (env["S"], env["N"], env["M"], env["J"], env["P_K"]) == ("value", "n1", "64", "value-v", "v")
    assert "O" not in env and env["HOSTNAME"] == "p" and env["KUBERNETES_SERVICE_PORT"] == "6443"
    container["env"] = [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "missing"}}}]
    with pytest.raises(ContainerConfigError) as caught:
        container_environment(pod, container, Image("i", ("/",)), lambda *key: secrets.get(key),
                              service=("h", 1), pod_ip="", host_ip="", allocatable={})
    assert caught.value.message == "couldn't find key missing in Secret ns/s"


def test_the_atomic_writer_swaps_all_files_at_once(tmp_path: Path) -> None:
    writer = AtomicDir(str(tmp_path), None)
    assert writer.write({"a": (b"1", 0o644), "d/b": (b"2", 0o400)})
    first = os.readlink(tmp_path / DATA_LINK)
    assert (tmp_path / "a").read_bytes() == b"1" and os.readlink(tmp_path / "a") == "..data/a"
    assert oct((tmp_path / "d/b").stat().st_mode & 0o777) == "0o400"
    assert not writer.write({"a": (b"1", 0o644), "d/b": (b"2", 0o400)})  # nothing changed
    assert writer.write({"a": (b"new", 0o644)})
    assert (tmp_path / "a").read_bytes() == b"new" and not (tmp_path / "d").exists()
    assert not (tmp_path / first).exists()  # the old payload is gone
    assert owner_mode(0o400, 7) == 0o440 and owner_mode(0o644, None) == 0o644


def test_image_directories(tmp_path: Path) -> None:
    (tmp_path / "top").mkdir()
    (tmp_path / "image.json").write_text(json.dumps({"layers": ["top", str(tmp_path)],
                                                     "config": {"User": "1000:1000", "Cmd": ["/start"]}}))
    image = load_image("pilot:1", str(tmp_path))
    assert image.layers == (str(tmp_path / "top"), str(tmp_path)) and image.user == "1000:1000"
    assert image.cmd == ("/start",) and image.env[0].startswith("PATH=")
    assert load_image("plain", str(tmp_path / "top")).layers == (str(tmp_path / "top"),)
    (tmp_path / "image.json").write_text('{"layers": ["nowhere"]}')
    with pytest.raises(ImageError, match="is not a directory"):
        load_image("pilot:1", str(tmp_path))
    assert parse_image_argument("a/b:1=/x") == ("a/b:1", "/x")
    with pytest.raises(ImageError, match="NAME=ROOTFS_DIR"):
        parse_image_argument("nodir")
