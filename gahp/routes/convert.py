"""``podgahp routes convert``: ``JOB_ROUTER_ENTRIES`` (old ClassAd syntax, gone in HTCondor 24.10)
rewritten as ``JOB_ROUTER_ROUTE_<name>`` transforms."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Tuple

import classad2

from gahp.errors import RoutesError
from gahp.routes.submit_ad import LIST_SEPARATORS, ad_value, delete_attributes


# --------------------------------------------------------------------------------------------
# Converting JOB_ROUTER_ENTRIES


#: Route-ad attributes that are router settings; they become bare macros of the same name.
ROUTE_MACROS: Tuple[str, ...] = (
    "TargetUniverse", "GridResource", "MaxJobs", "MaxIdleJobs", "FailureRateThreshold",
    "JobFailureTest", "OverrideRoutingEntry", "SendIDTokens", "EditJobInPlace",
    "UseSharedX509UserProxy", "SharedX509UserProxy", "JobShouldBeSandboxed",
)
_MACROS = {m.lower(): m for m in ROUTE_MACROS}
#: Order in which HTCondor applies old-syntax edits (and lists them when it converts a route).
_EDITS: Tuple[Tuple[str, str], ...] = (
    ("copy_", "COPY"), ("delete_", "DELETE"), ("set_", "SET"), ("eval_set_", "EVALSET"))
#: Knobs that convert() replaces.
_CONSUMED = ("JOB_ROUTER_ENTRIES", "JOB_ROUTER_DEFAULTS", "JOB_ROUTER_USE_DEPRECATED_ROUTER_ENTRIES",
             "MERGE_JOB_ROUTER_DEFAULT_ADS")
_UNSUPPORTED = ("JOB_ROUTER_ENTRIES_FILE", "JOB_ROUTER_ENTRIES_CMD")
_ASSIGNMENT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(@?=)\s*(.*)$")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_SCOPE = re.compile(r"\b(target|my)\.", re.IGNORECASE)


@dataclass(frozen=True)
class _Knob:
    """One assignment in a config file: its name, its value and the lines it spans."""

    name: str
    value: str
    first: int
    last: int


def _config_knobs(text: str) -> Iterator[_Knob]:
    """Assignments of an HTCondor config file (``NAME = value`` with ``\\`` continuations,
    ``NAME @=tag`` ... ``@tag``); comments, includes and conditionals are skipped."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        match = _ASSIGNMENT.match(line)
        if not match or line.lstrip().startswith("#"):
            i += 1
            continue
        name, op, rest = match.groups()
        first = i
        if op == "@=":
            tag = rest.strip()
            body: List[str] = []
            i += 1
            while i < len(lines) and lines[i].strip() != "@" + tag:
                body.append(lines[i])
                i += 1
            if i >= len(lines):
                raise RoutesError(f"line {first + 1}: {name} @={tag} has no closing @{tag}")
            yield _Knob(name, "\n".join(body), first, i)
            i += 1
            continue
        value = rest
        while value.endswith("\\") and i + 1 < len(lines):
            i += 1
            value = value[:-1] + "\n" + lines[i]
        yield _Knob(name, value.strip(), first, i)
        i += 1


def _plain_scope(expr: classad2.ExprTree, where: str) -> str:
    """Unparse ``expr`` with ``target.`` references made plain (new-syntax REQUIREMENTS see the job)."""
    text = str(expr)
    pieces: List[str] = []
    last = 0
    for string in _STRING.finditer(text):
        pieces.append(_strip_scope(text[last:string.start()], where))
        pieces.append(string.group(0))
        last = string.end()
    pieces.append(_strip_scope(text[last:], where))
    return "".join(pieces)


def _strip_scope(code: str, where: str) -> str:
    def replace(match: "re.Match[str]") -> str:
        if match.group(1).lower() == "my":
            raise RoutesError(f"{where} refers to the route itself (MY.); rewrite it by hand")
        return ""

    return _SCOPE.sub(replace, code)


def _parse_ads(text: str, knob: str) -> List[classad2.ClassAd]:
    ads: List[classad2.ClassAd] = []
    stripped = text.strip()
    if not stripped:
        return ads
    if not stripped.startswith("["):
        stripped = "[ " + stripped + " ]"
    try:
        ads = list(classad2.parseAds(stripped, classad2.ParserType.New))
    except Exception as e:  # noqa: BLE001 - the bindings raise a bare exception type on parse errors
        raise RoutesError(f"{knob} is not a list of ClassAds in new syntax ([ ... ] [ ... ]): {e}") from e
    if not ads:
        raise RoutesError(f"{knob} is not a list of ClassAds in new syntax ([ ... ] [ ... ])")
    return ads


def _route_name(value: object, index: int) -> Tuple[str, Optional[str]]:
    if not isinstance(value, str) or not value:
        return f"Route_{index}", f"entry {index} had no name"
    name = re.sub(r"[^A-Za-z0-9_]", "_", value)
    return name, (None if name == value else f"was named {value!r}")


def _convert_route(entry: classad2.ClassAd, index: int) -> Tuple[str, str]:
    """(route name, ``JOB_ROUTER_ROUTE_<name> @=jrt ... @jrt`` block) for one merged route ad."""
    name, note = _route_name(ad_value(entry, "Name"), index)
    where = f"route {name}"
    macros: List[Tuple[int, str]] = []
    requirements: Optional[str] = None
    edits: Dict[str, List[str]] = {keyword: [] for _, keyword in _EDITS}
    for attr in sorted(entry.keys(), key=str.lower):
        lower = attr.lower()
        expr = entry.lookup(attr)
        if lower == "name":
            continue
        if lower == "requirements":
            requirements = _plain_scope(expr, f"{where}: Requirements")
            continue
        if lower in _MACROS:
            macros.append((ROUTE_MACROS.index(_MACROS[lower]), f"{_MACROS[lower]} = {expr}"))
            continue
        if lower == "default_cerequirements":
            raise RoutesError(f"{where}: default_CERequirements is read from the job, not the route: "
                              f"write set_default_CERequirements = {expr}; and convert again")
        if lower.startswith("default_") and len(attr) > len("default_"):
            # HTCondor-CE's defaults (default_maxWallTime, ...) are macros of the route.
            macros.append((len(ROUTE_MACROS), f"{attr} = {expr}"))
            continue
        for prefix, keyword in _EDITS:
            if lower.startswith(prefix) and len(attr) > len(prefix):
                target = attr[len(prefix):]
                if keyword == "COPY":
                    value = entry.eval(attr)
                    if not isinstance(value, str) or not value:
                        raise RoutesError(f"{where}: {attr} must name the attribute to copy to, as a string")
                    edits[keyword].append(f"COPY {target} {value}")
                elif keyword == "DELETE":
                    edits[keyword].append(f"DELETE {target}")
                else:
                    edits[keyword].append(f"{keyword} {target} {expr}")
                break
        else:
            raise RoutesError(
                f"{where}: attribute {attr} is neither a route setting ({', '.join(ROUTE_MACROS)}), a "
                "CE default (default_*) nor a copy_/delete_/set_/eval_set_ edit; nothing reads it, remove it "
                "and convert again")
    # set_X before eval_set_X is the order HTCondor applies them; sorting by name above keeps a
    # stable order within each kind.
    lines = [f"JOB_ROUTER_ROUTE_{name} @=jrt"]
    if note:
        lines.insert(0, f"##  (converted: {note})")
    lines += [f"  {m}" for _, m in sorted(macros)]
    if requirements is not None:
        lines.append(f"  REQUIREMENTS {requirements}")
    for _, keyword in _EDITS:
        lines += [f"  {e}" for e in edits[keyword]]
    lines.append("@jrt")
    return name, "\n".join(lines)


def convert(text: str) -> str:
    """Rewrite a config file's ``JOB_ROUTER_ENTRIES`` (and ``JOB_ROUTER_DEFAULTS``) in route syntax.

    The entries are parsed with ``classad2``; each becomes ``JOB_ROUTER_ROUTE_<name> @=jrt ... @jrt``
    with the defaults merged in (the entry wins), route settings as bare macros, ``Requirements`` as
    ``REQUIREMENTS`` with ``target.`` dropped, and ``copy_``/``delete_``/``set_``/``eval_set_`` as
    ``COPY``/``DELETE``/``SET``/``EVALSET``; ``JOB_ROUTER_ROUTE_NAMES`` lists them in entry order.
    Every other line of the file is kept. Raises :class:`RoutesError` naming what cannot be converted.
    """
    knobs = list(_config_knobs(text))
    by_name: Dict[str, _Knob] = {}
    for knob in knobs:
        by_name[knob.name.upper()] = knob  # the last assignment wins, as in HTCondor
    entries_knob = _convertible(by_name)
    defaults_knob = by_name.get("JOB_ROUTER_DEFAULTS")
    defaults = _defaults(defaults_knob, by_name.get("MERGE_JOB_ROUTER_DEFAULT_ADS"))

    names: List[str] = []
    blocks: List[str] = []
    for index, entry in enumerate(_parse_ads(entries_knob.value, "JOB_ROUTER_ENTRIES"), start=1):
        merged = classad2.ClassAd()
        for key, expr in defaults.items():
            merged[key] = expr
        for key in entry.keys():
            delete_attributes(merged, key)
            merged[key] = entry.lookup(key)
        name, block = _convert_route(merged, index)
        if name in names:
            raise RoutesError(f"two entries are named {name}; route names must be unique")
        names.append(name)
        blocks.append(block)

    listed = route_names(by_name["JOB_ROUTER_ROUTE_NAMES"].value) if "JOB_ROUTER_ROUTE_NAMES" in by_name else []
    new_names = [n for n in names if n not in listed]
    replacement = [
        "##  Routes converted from JOB_ROUTER_ENTRIES by podgahp routes convert"
        + (" (JOB_ROUTER_DEFAULTS merged into each)" if defaults_knob is not None else "") + ".",
        "##  Match order: the order of JOB_ROUTER_ROUTE_NAMES.",
    ]
    if new_names:
        # First: a catch-all route defined elsewhere (an HTCondor-CE batch-system package) would
        # otherwise take every job before them.
        replacement.append("JOB_ROUTER_ROUTE_NAMES = " + " ".join(new_names) + " $(JOB_ROUTER_ROUTE_NAMES)")
    replacement.append("")
    replacement.append("\n\n".join(blocks))
    header = ["##  Converted to JOB_ROUTER_ROUTE_* routes by podgahp routes convert; the comments are",
              "##  those of the original file, which used JOB_ROUTER_ENTRIES.", ""]
    out = _replace_knobs(text, knobs, entries_knob, replacement)
    return "\n".join(header + out).rstrip("\n") + "\n"


def _convertible(by_name: Dict[str, _Knob]) -> _Knob:
    """The JOB_ROUTER_ENTRIES knob, once nothing stands in the way of converting it."""
    for unsupported in _UNSUPPORTED:
        if unsupported in by_name:
            raise RoutesError(f"{unsupported} is set: convert the routes it provides (put them in "
                              "JOB_ROUTER_ENTRIES of a file) and run convert on that file")
    entries_knob = by_name.get("JOB_ROUTER_ENTRIES")
    if entries_knob is None or not entries_knob.value.strip():
        raise RoutesError("no JOB_ROUTER_ENTRIES in this file: nothing to convert")
    for source in (entries_knob, by_name.get("JOB_ROUTER_DEFAULTS")):
        if source is not None and "$(" in source.value:
            raise RoutesError(f"{source.name} uses config macros ($(...)); expand them first "
                              f"(condor_config_val {source.name}) and convert the expanded text")
    return entries_knob


def _defaults(defaults_knob: Optional[_Knob], merge: Optional[_Knob]) -> Dict[str, classad2.ExprTree]:
    """JOB_ROUTER_DEFAULTS as attributes (several ads merged, as HTCondor does when told to)."""
    defaults: Dict[str, classad2.ExprTree] = {}
    if defaults_knob is None:
        return defaults
    default_ads = _parse_ads(defaults_knob.value, "JOB_ROUTER_DEFAULTS")
    if len(default_ads) > 1 and not (merge and merge.value.strip().lower() in ("true", "1", "yes")):
        raise RoutesError("JOB_ROUTER_DEFAULTS holds several ClassAds but MERGE_JOB_ROUTER_DEFAULT_ADS "
                          "is not True, so HTCondor would not read them; fix that first")
    for ad in default_ads:
        for key in ad.keys():
            defaults[key] = ad.lookup(key)
    return defaults


def _replace_knobs(text: str, knobs: List[_Knob], entries_knob: _Knob, replacement: List[str]) -> List[str]:
    """The file's lines with JOB_ROUTER_ENTRIES replaced and the knobs it made obsolete commented on."""
    consumed = {k.first: k for k in knobs if k.name.upper() in _CONSUMED}
    out: List[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        here = consumed.get(i)
        if here is None:
            out.append(lines[i])
            i += 1
            continue
        if here is entries_knob:
            out.extend(replacement)
        elif here.name.upper() == "JOB_ROUTER_USE_DEPRECATED_ROUTER_ENTRIES":
            out.append("##  (JOB_ROUTER_USE_DEPRECATED_ROUTER_ENTRIES dropped: the routes use the new syntax)")
        elif here.name.upper() == "JOB_ROUTER_DEFAULTS":
            out.append("##  (JOB_ROUTER_DEFAULTS merged into the routes below)")
        i = here.last + 1
    return out


def route_names(value: Optional[str]) -> List[str]:
    return [n for n in LIST_SEPARATORS.split(value or "") if n]
