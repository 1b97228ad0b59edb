"""Macros of old-syntax routes read from one file, kept where the file does not define them.

The JobRouter of HTCondor 23 expanded ``JOB_ROUTER_ENTRIES`` as a configuration value: every
``$(NAME)`` became NAME's value in the CE's whole configuration, and a NAME defined nowhere became
nothing. A route file read alone often refers to macros that other files of the site define
(``eval_set_IdleMP8Pressure = $(IdleMP8Pressure);``); expanded to nothing they leave entries that
are no ClassAds. So, before HTCondor expands the file's routes, each macro that neither the file
nor HTCondor itself defines is given a stand-in value, a token that reads as an attribute name
(``podgahp_macro_0_``): HTCondor expands everything else as the JobRouter did (the file's own
macros, self-references such as ``JOB_ROUTER_DEFAULTS = $(JOB_ROUTER_DEFAULTS) [...]``, detected
values such as ``FULL_HOSTNAME``), the entries parse, and the converted text gets the references
back (:meth:`KeptMacros.restore`), so the new routes expand them where they run, from the rest of
the site's configuration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from gahp.core.errors import RoutesError

#: ``$(NAME)`` and ``$(NAME:default)``; HTCondor's other ``$...(`` forms are left to HTCondor.
REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.]*)(?::([^()]*))?\)")
#: Stand-in values start with this; none of HTCondor's or HTCondor-CE's names does.
TOKEN_PREFIX = "podgahp_macro_"
#: Most macros followed from one file's routes (a site file names a handful).
MAX_MACROS = 200
#: Knobs of the old syntax a route file refers to for what came before it (HTCondor-CE 23.0's
#: ``JOB_ROUTER_DEFAULTS = $(JOB_ROUTER_DEFAULTS_GENERATED) [...]``): the CE's own defaults, which
#: its transforms now apply, so read alone they stay nothing, as before.
NOT_KEPT = ("JOB_ROUTER_DEFAULTS", "JOB_ROUTER_DEFAULTS_GENERATED", "JOB_ROUTER_ENTRIES")


@dataclass(frozen=True)
class KeptMacros:
    """Macros the file does not define: each one's stand-in token and the reference it restores."""

    references: Tuple[Tuple[str, str, str], ...] = ()
    """(name, token, reference as written) of each kept macro, in the order first met."""
    needed: Tuple[str, ...] = field(default_factory=tuple)
    """Names kept without a default: the rest of the configuration must define them."""

    def definitions(self) -> str:
        """Configuration lines giving each kept macro its token."""
        return "".join(f"{name} = {token}\n" for name, token, _ in self.references)

    def proof_definitions(self) -> str:
        """Configuration lines for the proof: each kept macro without a default stands for an
        unknown value (its token, an attribute no pilot has); one with a default stays undefined,
        so that both the old and the converted routes take the default."""
        return "".join(f"{name} = {token}\n" for name, token, _ in self.references if name in self.needed)

    def restore(self, text: str) -> str:
        """``text`` with every token back as the reference it stands for."""
        # Longest tokens first: podgahp_macro_1_ is not a prefix of podgahp_macro_10_, but keep it safe.
        for _, token, reference in sorted(self.references, key=lambda r: -len(r[1])):
            text = text.replace(token, reference)
        return text

    def tokens_in(self, text: str) -> List[str]:
        """The references whose tokens ``text`` holds."""
        return [reference for _, token, reference in self.references if token in text]


def references(text: str) -> List[Tuple[str, Optional[str], str]]:
    """(name, default or None, text) of each ``$(NAME)``/``$(NAME:default)`` of ``text``."""
    return [(m.group(1), m.group(2), m.group(0)) for m in REFERENCE.finditer(text)]


def keep_undefined(raw_values: Iterable[str], lookup: Callable[[str], Optional[str]]) -> KeptMacros:
    """The macros that ``raw_values`` (knob values as written, unexpanded) refer to, directly or
    through the macros they refer to, and that nothing defines: ``lookup(name)`` is a defined
    macro's raw value, None when HTCondor does not define it."""
    pending: List[str] = list(raw_values)
    seen: Dict[str, Optional[str]] = {}
    spelled: Dict[str, List[Tuple[Optional[str], str]]] = {}
    order: List[str] = []
    while pending:
        for name, default, written in references(pending.pop(0)):
            key = name.upper()
            spelled.setdefault(key, []).append((default, written))
            if key in seen:
                continue
            if len(seen) >= MAX_MACROS:
                raise RoutesError(f"the routes refer to more than {MAX_MACROS} macros: is this a route file?")
            value = lookup(name)
            seen[key] = value
            order.append(name)
            if value is not None:
                pending.append(value)
    kept: List[Tuple[str, str, str]] = []
    needed: List[str] = []
    for name in order:
        if seen[name.upper()] is not None or name.upper() in NOT_KEPT:
            continue
        forms = spelled[name.upper()]
        defaults = {default for default, _ in forms}
        # One spelling everywhere: kept as written; else the bare reference.
        reference = forms[0][1] if len(defaults) == 1 else f"$({name})"
        kept.append((name, f"{TOKEN_PREFIX}{len(kept)}_", reference))
        if None in defaults:
            needed.append(name)
    return KeptMacros(tuple(kept), tuple(needed))
