"""Container image references: validity, normalisation, pull policy default, simulated digests.

Grammar from ``github.com/distribution/reference`` (``reference.go``); normalisation as containerd
reports it (``htcondor/execute:lts`` -> ``docker.io/htcondor/execute:lts``).  Owns no state.
"""

from __future__ import annotations

import hashlib
import re
from typing import Optional, Tuple

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = r"(?:%s(?:\.%s)*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?" % (_DOMAIN_PART, _DOMAIN_PART)
_DOMAIN_RE = re.compile(r"^%s$" % _DOMAIN)
_REFERENCE = re.compile(
    r"^(?P<path>%s(?:/%s)*)(?::(?P<tag>[\w][\w.-]{0,127}))?"
    r"(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?$"
    % (_COMPONENT, _COMPONENT))


def parse_reference(image: str) -> Optional[Tuple[str, str, str, str]]:
    """(domain, path, tag, digest) of a normalised reference, or ``None`` if the reference is invalid."""
    if not image or len(image) > 255:
        return None
    first, sep, rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        domain, remainder = first, rest
    else:
        domain, remainder = "docker.io", image
    match = _REFERENCE.match(remainder)
    if not match or not _DOMAIN_RE.match(domain):
        return None
    path = match.group("path")
    if domain == "docker.io" and "/" not in path:
        path = "library/" + path
    return domain, path, match.group("tag") or "", match.group("digest") or ""


def normalised(image: str) -> str:
    """``docker.io/library/busybox:latest`` for ``busybox``; the input if it is invalid."""
    ref = parse_reference(image)
    if ref is None:
        return image
    domain, path, tag, digest = ref
    text = "%s/%s" % (domain, path)
    if tag or not digest:
        text += ":" + (tag or "latest")
    if digest:
        text += "@" + digest
    return text


def default_pull_policy(image: str) -> str:
    """``Always`` for ``:latest`` or untagged images, else ``IfNotPresent`` (pod defaulting)."""
    ref = parse_reference(image)
    if ref is None:
        return "IfNotPresent" if ":" in image.rsplit("/", 1)[-1] else "Always"
    _domain, _path, tag, digest = ref
    if digest:
        return "IfNotPresent"
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def image_id(image: str) -> str:
    """A stable fake repo digest, ``docker.io/library/busybox@sha256:...``."""
    ref = parse_reference(image)
    name = image if ref is None else "%s/%s" % (ref[0], ref[1])
    if ref is not None and ref[3]:
        return "%s@%s" % (name, ref[3])
    return "%s@sha256:%s" % (name, hashlib.sha256(normalised(image).encode()).hexdigest())


def invalid_name_message(image: str) -> str:
    """Waiting message of ``InvalidImageName`` (kubelet ``applyDefaultImageTag``)."""
    return ('Failed to apply default image tag "%s": couldn\'t parse image reference "%s": '
            "invalid reference format" % (image, image))


def pull_error_message(image: str) -> str:
    """Waiting message of ``ErrImagePull`` for an image the registry does not have (containerd)."""
    full = normalised(image)
    return ('failed to pull and unpack image "%s": failed to resolve reference "%s": %s: not found'
            % (full, full, full))


def backoff_message(image: str) -> str:
    return 'Back-off pulling image "%s"' % image
