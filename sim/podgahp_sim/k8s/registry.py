"""The images a simulated node with a real container runtime can run: image reference -> layers on disk
and the image's configuration.

An image is either a plain root filesystem directory (a Debian root from the harness, say: it runs as
root with the standard ``PATH``) or an *image directory* holding ``image.json``::

    {"layers": ["rootfs", "/var/cache/podgahp/rootfs/trixie"],       # top first, relative to the file
     "config": {"User": "1000:1000", "Env": ["PATH=..."], "Entrypoint": [...], "Cmd": [...],
                "WorkingDir": "/"}}

``config`` takes the fields of the OCI image configuration (``image-spec/config.md``) that a kubelet
reads.  Owns no state beyond the map; knows nothing of pods or runc.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

from .images import normalised

IMAGE_FILE = "image.json"
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MAX_IMAGE_FILE_BYTES = 64 * 1024


class ImageError(ValueError):
    """An image directory or ``NAME=DIR`` argument that cannot be used."""


@dataclass(frozen=True)
class Image:
    """One image: its layers (top first, as overlayfs's ``lowerdir``) and OCI image configuration."""

    reference: str
    layers: Tuple[str, ...]
    user: str = ""
    """``User`` of the image configuration: ``uid``, ``uid:gid``, ``name`` or ``name:group``; empty is root."""
    env: Tuple[str, ...] = (DEFAULT_PATH,)
    entrypoint: Tuple[str, ...] = ()
    cmd: Tuple[str, ...] = ()
    working_dir: str = ""

    def find(self, path: str) -> Optional[str]:
        """Host path of ``path`` in the image's merged file system (the topmost layer that has it)."""
        for layer in self.layers:
            candidate = os.path.join(layer, path.lstrip("/"))
            if os.path.lexists(candidate):
                return candidate
        return None


def _strings(value: object, what: str) -> Tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ImageError("%s must be a list of strings" % what)
    return tuple(value)


def load_image(reference: str, directory: str) -> Image:
    """The image at ``directory``: an image directory (with ``image.json``) or a root filesystem."""
    directory = os.path.abspath(directory)
    if not os.path.isdir(directory):
        raise ImageError("image %s: %s is not a directory" % (reference, directory))
    path = os.path.join(directory, IMAGE_FILE)
    if not os.path.isfile(path):
        return Image(reference, (directory,))
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_IMAGE_FILE_BYTES + 1)
        if len(raw) > MAX_IMAGE_FILE_BYTES:
            raise ImageError("image %s: %s is larger than %d bytes" % (reference, path, MAX_IMAGE_FILE_BYTES))
        doc = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        if isinstance(e, ImageError):
            raise
        raise ImageError("image %s: %s cannot be read: %s" % (reference, path, e)) from None
    if not isinstance(doc, dict):
        raise ImageError("image %s: %s is not a JSON object" % (reference, path))
    layers = tuple(os.path.normpath(os.path.join(directory, layer)) for layer in _strings(doc.get("layers"), "layers"))
    if not layers:
        raise ImageError("image %s: %s names no layers" % (reference, path))
    for layer in layers:
        if not os.path.isdir(layer):
            raise ImageError("image %s: layer %s is not a directory" % (reference, layer))
    config = doc.get("config") or {}
    if not isinstance(config, dict):
        raise ImageError("image %s: config must be an object" % reference)
    user = config.get("User") or ""
    working_dir = config.get("WorkingDir") or ""
    if not isinstance(user, str) or not isinstance(working_dir, str):
        raise ImageError("image %s: User and WorkingDir must be strings" % reference)
    env = _strings(config.get("Env"), "Env") or (DEFAULT_PATH,)
    return Image(reference, layers, user, env, _strings(config.get("Entrypoint"), "Entrypoint"),
                 _strings(config.get("Cmd"), "Cmd"), working_dir)


def parse_image_argument(text: str) -> Tuple[str, str]:
    """``NAME=DIR`` (the ``--image`` option) -> (NAME, DIR)."""
    name, sep, directory = text.partition("=")
    if not sep or not name or not directory:
        raise ImageError("--image wants NAME=ROOTFS_DIR, not %r" % text)
    return name, directory


class Registry:
    """Image reference (as a pod names it, or normalised) -> :class:`Image`."""

    def __init__(self, images: Mapping[str, str]) -> None:
        self._images: Dict[str, Image] = {}
        for reference, directory in images.items():
            image = load_image(reference, directory)
            self._images[reference] = image
            self._images[normalised(reference)] = image

    def get(self, reference: str) -> Optional[Image]:
        return self._images.get(reference) or self._images.get(normalised(reference))

    def references(self) -> List[str]:
        """The references the images were given under."""
        return sorted({image.reference for image in self._images.values()})

    def __contains__(self, reference: object) -> bool:
        return isinstance(reference, str) and self.get(reference) is not None
