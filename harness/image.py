"""The pilot image: an installation's root filesystem (HTCondor inside) with podgahp's pilot start
script and an ordinary user to run it, as an image directory the simulated cluster's runc runtime
runs (``podgahp_sim.k8s.registry``).

Owns: laying out the image's top layer (``/usr/local/bin/podgahp-pilot-startup.sh``, the ``pilot``
user in ``/etc/passwd`` and ``/etc/group``, its home, and nothing of what the harness's pools leave
in the root) and ``image.json`` naming the layers (that top
layer over the installation's root) and the image configuration (user, ``PATH``, the start script as
its command).  Each distinct content gets its own directory, made under a lock and renamed into
place, so concurrent test runs share it.  Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import time
from pathlib import Path
from typing import List, Optional, Tuple

from harness.rootfs import REPO_DIR, Installation, _locked, cache_dir

#: The pilot's start script in the checkout and where the image has it.
START_SCRIPT = REPO_DIR / "gahp" / "data" / "podgahp-pilot-startup.sh"
IMAGE_START_SCRIPT = "/usr/local/bin/podgahp-pilot-startup.sh"
#: The user the image runs as (numeric, so that a pod's runAsNonRoot can be checked).
USER = "pilot"
UID = 1000
#: How tests and the demo name the image in pods.
REFERENCE = "registry.podgahp.test/pilot:{series}"
PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _user_table(root: Path, name: str, uid: int) -> Tuple[str, str, int]:
    """The root's passwd and group, with ``name`` added (uid/gid ``uid``, or the next free) if missing."""
    passwd = (root / "etc/passwd").read_text()
    group = (root / "etc/group").read_text()
    entries = [line.split(":") for line in passwd.splitlines() if line.count(":") >= 6]
    for entry in entries:
        if entry[0] == name:
            return passwd, group, int(entry[2])
    taken = {int(e[2]) for e in entries if e[2].isdigit()}
    taken |= {int(line.split(":")[2]) for line in group.splitlines() if line.count(":") >= 3 and
              line.split(":")[2].isdigit()}
    while uid in taken:
        uid += 1
    passwd += f"{name}:x:{uid}:{uid}::/home/{name}:/bin/sh\n"
    group += f"{name}:x:{uid}:\n"
    return passwd, group, uid


def pilot_image(installation: Installation, cache: Optional[Path] = None) -> Tuple[str, Path]:
    """(reference, image directory) of the pilot image of ``installation``, made if needed."""
    root = installation.root
    passwd, group, uid = _user_table(root, USER, UID)
    script = START_SCRIPT.read_bytes()
    digest = hashlib.sha256(b"\0".join([str(root).encode(), passwd.encode(), group.encode(), script])).hexdigest()[:16]
    images = (cache or cache_dir()).parent / "images"
    target = images / f"pilot-{installation.name}-{digest}"
    reference = REFERENCE.format(series=installation.name)
    if (target / "image.json").is_file():
        return reference, target
    with _locked(images / f"pilot-{installation.name}.lock"):
        if (target / "image.json").is_file():
            return reference, target
        tmp = images / f".pilot-{installation.name}-{digest}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        layer = tmp / "rootfs"
        (layer / "etc").mkdir(parents=True)
        (layer / "etc/passwd").write_text(passwd)
        (layer / "etc/group").write_text(group)
        (layer / "usr/local/bin").mkdir(parents=True)
        (layer / IMAGE_START_SCRIPT.lstrip("/")).write_bytes(script)
        (layer / IMAGE_START_SCRIPT.lstrip("/")).chmod(0o755)
        home = layer / "home" / USER
        home.mkdir(parents=True)
        os.chown(home, uid, uid)
        # The harness runs pools inside the same root: their directories and users' homes are not
        # part of the image (an overlayfs opaque directory and a whiteout hide them).
        os.setxattr(layer / "home", "trusted.overlay.opaque", b"y")
        (layer / "srv").mkdir()
        os.mknod(layer / "srv" / "podgahp", stat.S_IFCHR | 0o600, os.makedev(0, 0))
        layers: List[str] = ["rootfs", str(root)]
        (tmp / "image.json").write_text(json.dumps({
            "layers": layers,
            "config": {"User": f"{uid}:{uid}", "Env": [PATH, f"HOME=/home/{USER}"],
                       "Cmd": [IMAGE_START_SCRIPT], "WorkingDir": f"/home/{USER}"},
            "condor_version": installation.condor_version,
        }, indent=1) + "\n")
        tmp.rename(target)
        # images of earlier checkouts, unless a run may still use one (a day)
        for old in images.glob(f"pilot-{installation.name}-*"):
            if old != target and old.is_dir() and time.time() - old.stat().st_mtime > 86400:
                shutil.rmtree(old, ignore_errors=True)
    return reference, target
