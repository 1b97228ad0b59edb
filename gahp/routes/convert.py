"""``podgahp routes convert``: routes in the old ``JOB_ROUTER_ENTRIES`` syntax (read by HTCondor
23.x and 24.0 only) rewritten as ``JOB_ROUTER_ROUTE_<name>`` transforms, without loss.

HTCondor reads the file (:func:`read_old_routes`: comments, continuations, ``@=`` blocks, macros,
includes, nothing run; the macros the file does not define kept, :mod:`gahp.routes.macros`), and the
entries are taken as HTCondor 23's JobRouter took them (:func:`old_entries`: ``JOB_ROUTER_ENTRIES_FILE``
then ``JOB_ROUTER_ENTRIES``, a later entry of a name replacing the earlier, none after one that is not
a ClassAd); :func:`convert_routes` then rewrites each entry, merged with ``JOB_ROUTER_DEFAULTS`` as the
JobRouter merges them:

* ``Requirements`` → ``REQUIREMENTS`` (references to the route's own attributes inlined, ``TARGET.``
  dropped: a route's requirements now see the job directly);
* route settings (``GridResource``, ``MaxJobs``, ...) → macros of the same name;
* ``copy_``/``delete_``/``set_``/``eval_set_`` → ``COPY``/``DELETE``/``SET``/``EVALSET``, in the order
  the old syntax applied them (``eval_set_`` expressions with the route's own attributes inlined, as
  there they were evaluated with the route as ``MY``);
* HTCondor-CE's route defaults — ``default_xcount``, ``default_maxMemory``, ``default_queue``,
  ``default_maxWallTime``, ``default_pilot_job_env``, given as ``set_default_*``, ``eval_set_default_*``
  or a plain ``default_*`` attribute — → the ``default_*`` **macros** the CE's transforms read
  (HTCondor's own converter writes ``SET default_*``, a job attribute the CE never reads);
  ``default_CERequirements``, which the CE reads from the job, → ``SET default_CERequirements``;
* any other attribute → a macro of the same name, as HTCondor's converter keeps it;
* for an HTCondor-CE, what the CE's 23.0 route defaults did for the route
  (:mod:`gahp.routes.ce_meaning`).

What no statement can say is still converted, as closely as it can be, after a ``# podgahp: CHECK``
comment (:attr:`ConvertedRoute.checks`; the proof adds what it finds different, :func:`mark_checks`).

The rest of the file stays as it was, comments included; the comments inside
``JOB_ROUTER_ENTRIES`` go with the route they were written in. ``JOB_ROUTER_ROUTE_NAMES``: where the
file sets it, it stays (the routes it leaves out were not used before either, and a note says so);
where it does not, the converted routes are listed first, without leaving an empty name.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Sequence, Tuple

import classad2

from gahp.core.errors import InvalidJob, RoutesError
from gahp.core.files import read_input
from gahp.routes.ce_meaning import ce_statements
from gahp.routes.config_text import Statement
from gahp.routes.macros import TOKEN_PREFIX, KeptMacros, keep_undefined
from gahp.routes.sources import SafeConfig
from gahp.routes.submit_ad import LIST_SEPARATORS, ad_value, delete_attributes

#: Route-ad attributes that are router settings; they become bare macros of the same name.
ROUTE_MACROS: Tuple[str, ...] = (
    "TargetUniverse", "GridResource", "MaxJobs", "MaxIdleJobs", "FailureRateThreshold",
    "JobFailureTest", "OverrideRoutingEntry", "SendIDTokens", "EditJobInPlace",
    "UseSharedX509UserProxy", "SharedX509UserProxy", "JobShouldBeSandboxed",
)
_MACROS = {m.lower(): m for m in ROUTE_MACROS}
#: HTCondor-CE's route defaults: read by its transforms as macros of the route.
CE_DEFAULT_MACROS: Tuple[str, ...] = ("default_xcount", "default_maxMemory", "default_queue",
                                      "default_maxWallTime", "default_pilot_job_env")
_CE_DEFAULTS = {m.lower(): m for m in CE_DEFAULT_MACROS}
#: Order in which HTCondor applies old-syntax edits.
_EDITS: Tuple[Tuple[str, str], ...] = (
    ("copy_", "COPY"), ("delete_", "DELETE"), ("set_", "SET"), ("eval_set_", "EVALSET"))
#: Knobs of the old syntax that the conversion replaces or makes pointless.
_CONSUMED = ("JOB_ROUTER_ENTRIES", "JOB_ROUTER_DEFAULTS", "JOB_ROUTER_USE_DEPRECATED_ROUTER_ENTRIES",
             "MERGE_JOB_ROUTER_DEFAULT_ADS", "JOB_ROUTER_ENTRIES_FILE")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_TARGET = re.compile(r"\btarget\.", re.IGNORECASE)
_TRUE = ("true", "1", "yes", "t")


@dataclass(frozen=True)
class OldRoutes:
    """The old-syntax routes of one file, as HTCondor reads them, and the file's text."""

    path: str
    lines: Tuple[str, ...]
    statements: Tuple[Statement, ...]
    entries: str
    defaults: str = ""
    merge_defaults: bool = False
    route_names: Optional[str] = None
    names_in_file: bool = False
    entries_file: str = ""
    file_entries: str = ""
    """The text of JOB_ROUTER_ENTRIES_FILE (read as it is: the JobRouter expanded no macro in it)."""
    macros: KeptMacros = field(default_factory=KeptMacros)
    """Macros the file does not define, kept as tokens in ``entries`` and ``defaults``."""


@dataclass(frozen=True)
class ConvertedRoute:
    """One converted route: its name, its block, and what an admin should know about it."""

    name: str
    block: str
    entry: str
    notes: Tuple[str, ...] = ()
    grid_resource: str = ""
    checks: Tuple[str, ...] = ()
    """What the converted route does not do as the old one did (written as ``# podgahp: CHECK``)."""
    universe: int = 9
    """The universe it routes jobs to (TargetUniverse: 5 an HTCondor pool, 9 the grid)."""


@dataclass(frozen=True)
class Conversion:
    """A converted file."""

    text: str
    routes: Tuple[ConvertedRoute, ...]
    notes: Tuple[str, ...] = field(default_factory=tuple)
    problems: Tuple[str, ...] = field(default_factory=tuple)
    """What of the file could not be converted at all (an entry that is not a ClassAd)."""

    @property
    def checks(self) -> Tuple[str, ...]:
        """What was not converted, then every route's CHECK as ``route <name>: <what differs>``."""
        return self.problems + tuple(f"route {r.name}: {c}" for r in self.routes for c in r.checks)


CHECK_MARK = "# podgahp: CHECK "


def mark_checks(conversion: Conversion, found: Dict[str, Sequence[str]]) -> Conversion:
    """``conversion`` with ``found`` (route name -> what differs) written as ``# podgahp: CHECK``
    comments before each route's block, and kept in its routes' ``checks``."""
    lines = conversion.text.splitlines()
    routes = []
    for route in conversion.routes:
        new = tuple(c for c in found.get(route.name, ()) if c not in route.checks)
        if new:
            start = lines.index(f"JOB_ROUTER_ROUTE_{route.name} @=jrt")
            lines[start:start] = [CHECK_MARK + c for c in new]
            route = replace(route, checks=route.checks + new)
        routes.append(route)
    return Conversion("\n".join(lines) + "\n", tuple(routes), conversion.notes, conversion.problems)


# --------------------------------------------------------------------------------------------
# Reading


def read_old_routes(safe: SafeConfig, path: str) -> OldRoutes:
    """The old-syntax routes of ``path``, read by HTCondor (``safe`` holds only that file); the
    macros the file does not define are kept (:mod:`gahp.routes.macros`)."""
    path = os.path.abspath(path)
    safe.include(path)
    tools = safe.tools()
    copy = safe.copies[path]
    _refuse_commands(copy.statements, path)
    raw = [tools.raw(knob) or "" for knob in ("JOB_ROUTER_ENTRIES", "JOB_ROUTER_DEFAULTS")]
    kept = keep_undefined(raw, tools.raw)
    if kept.references:
        safe.add(kept.definitions())
        tools = safe.tools()
    entries = tools.value("JOB_ROUTER_ENTRIES") or ""
    entries_file = (tools.value("JOB_ROUTER_ENTRIES_FILE") or "").strip()
    file_entries = _entries_file(entries_file)
    if not entries.strip() and not file_entries.strip():
        raise RoutesError(f"{path}: no JOB_ROUTER_ENTRIES (nor JOB_ROUTER_ENTRIES_FILE): nothing to convert")
    names_at = [s for s in copy.statements if s.knob == "JOB_ROUTER_ROUTE_NAMES"]
    return OldRoutes(
        path=path, lines=tuple(copy.lines), statements=tuple(copy.statements), entries=entries,
        defaults=tools.value("JOB_ROUTER_DEFAULTS") or "",
        merge_defaults=(tools.value("MERGE_JOB_ROUTER_DEFAULT_ADS") or "").strip().lower() in _TRUE,
        route_names=tools.value("JOB_ROUTER_ROUTE_NAMES"), names_in_file=bool(names_at),
        entries_file=entries_file, file_entries=file_entries, macros=kept)


def _refuse_commands(statements: Sequence[Statement], path: str) -> None:
    """Refuse a file whose routes come from a program (``JOB_ROUTER_ENTRIES_CMD``): podgahp runs none."""
    for knob in ("JOB_ROUTER_ENTRIES_CMD",):
        found = [s for s in statements if s.knob == knob]
        if found:
            raise RoutesError(f"{path}:{found[0].first + 1}: {knob} runs a program, which podgahp never does: run it "
                              "yourself, put what it prints into JOB_ROUTER_ENTRIES and convert that")


def _entries_file(entries_file: str) -> str:
    """The text of ``JOB_ROUTER_ENTRIES_FILE`` (bounded, read as any input file is), or ``""`` when unset."""
    if not entries_file:
        return ""
    try:
        data = read_input(entries_file, "JOB_ROUTER_ENTRIES_FILE", 4 * 1024 * 1024, "a routes file")
    except InvalidJob as e:
        raise RoutesError(str(e)) from None
    return data.decode("utf-8", "replace")


# --------------------------------------------------------------------------------------------
# ClassAds of the old syntax


def parse_entries(text: str, what: str = "JOB_ROUTER_ENTRIES") -> List[classad2.ClassAd]:
    """The ClassAds of ``text`` (``[ ... ] [ ... ]``)."""
    stripped = text.strip()
    if not stripped:
        return []
    if not stripped.startswith("["):
        stripped = "[ " + stripped + " ]"
    try:
        ads = list(classad2.parseAds(stripped, classad2.ParserType.New))
    except Exception as e:  # noqa: BLE001 - the bindings raise a bare exception type on parse errors
        raise RoutesError(f"{what} is not a list of ClassAds ([ ... ] [ ... ]): {e}") from e
    if not ads:
        raise RoutesError(f"{what} is not a list of ClassAds ([ ... ] [ ... ])")
    return ads


@dataclass(frozen=True)
class OldEntry:
    """One entry the JobRouter kept: its ad, the knob it came from and its place there (0-based)."""

    ad: classad2.ClassAd
    knob: str
    index: int


def _wrapped(text: str) -> str:
    """Entries as the JobRouter parses them: text that does not start with ``[`` is one ad's body."""
    stripped = text.strip()
    return stripped if not stripped or stripped.startswith("[") else f"[ {stripped} ]"


def leading_entries(text: str) -> Tuple[List[classad2.ClassAd], bool]:
    """The entries of ``text`` up to the first that is not a ClassAd, and whether there is one:
    the JobRouter parsed ``[ ... ]`` after ``[ ... ]`` and stopped at the first it could not."""
    ads: List[classad2.ClassAd] = []
    for piece in _pieces(text):
        try:
            ad = classad2.parseOne(piece, classad2.ParserType.New) if piece.startswith("[") else None
        except Exception:  # noqa: BLE001 - the bindings raise a bare exception type on parse errors
            ad = None
        if not isinstance(ad, classad2.ClassAd) or not piece.endswith("]"):
            return ads, True
        ads.append(ad)
    return ads, False


def _pieces(text: str) -> List[str]:
    """``text`` cut after each top-level ``]`` (strings and comments skipped); the rest, unclosed,
    is the last piece."""
    pieces: List[str] = []
    depth, start, i = 0, None, 0
    while i < len(text):
        if start is None and not text[i].isspace():
            start = i
        after = _after_string_or_comment(text, i)
        if after != i:
            i = after
            continue
        if text[i] == "[":
            depth += 1
        elif text[i] == "]":
            depth -= 1
            if depth == 0 and start is not None:
                pieces.append(text[start:i + 1])
                start = None
        i += 1
    if start is not None and text[start:].strip():
        pieces.append(text[start:].strip())
    return pieces


def _after_string_or_comment(text: str, i: int) -> int:
    """Where the string literal or comment starting at ``i`` ends (past its closing quote, at the
    newline of a ``//`` comment, past ``*/``; the text's end when unclosed), or ``i`` if none starts there."""
    n = len(text)
    if text[i] == '"':
        i += 1
        while i < n and text[i] != '"':
            i += 2 if text[i] == "\\" else 1
        return i + 1
    if text.startswith("//", i):
        end = text.find("\n", i)
        return end if end >= 0 else n
    if text.startswith("/*", i):
        end = text.find("*/", i)
        return end + 2 if end >= 0 else n
    return i


def old_entries(old: OldRoutes) -> Tuple[List[OldEntry], List[str], List[str]]:
    """The entries the JobRouter used, in its order, a note for each one replaced, and what it
    could not read (an entry that is not a ClassAd: it ignored that one and the rest).

    HTCondor 23's JobRouter read ``JOB_ROUTER_ENTRIES_FILE``, then ``JOB_ROUTER_ENTRIES``; an entry
    of a name already read replaces the earlier one, in the earlier one's place, unless it says
    ``OverrideRoutingEntry = false`` (then it is the one dropped)."""
    kept: List[OldEntry] = []
    notes: List[str] = []
    problems: List[str] = []
    for knob, text in (("JOB_ROUTER_ENTRIES_FILE", old.file_entries), ("JOB_ROUTER_ENTRIES", old.entries)):
        ads, broken = leading_entries(_wrapped(text))
        if broken:
            said = _unreadable_entry(old, knob, len(ads))
            if not ads:
                raise RoutesError(f"{said}: fix it and convert again")
            problems.append(f"{said}: the JobRouter ignored it and what follows it, and so does the conversion; "
                            "fix it and convert again")
        for index, ad in enumerate(ads):
            note = _keep_entry(kept, OldEntry(ad, knob, index))
            if note:
                notes.append(note)
    return kept, notes, problems


def _unreadable_entry(old: OldRoutes, knob: str, readable: int) -> str:
    """What to say of the entry of ``knob`` after its first ``readable`` ones, which is not a ClassAd:
    where it is (the file's line for ``JOB_ROUTER_ENTRIES``, when it can be found)."""
    where = f"{old.entries_file}: entry {readable + 1}"
    if knob == "JOB_ROUTER_ENTRIES":
        statement = [s for s in old.statements if s.knob == knob and s.kind in ("assign", "block")]
        line = bad_entry_line(old.lines, statement[-1]) if statement else None
        where = f"{old.path}:{line + 1}" if line is not None else f"{old.path}: entry {readable + 1}"
    return f"{where}: this entry of {knob} is not a ClassAd (an unclosed string or bracket, a missing ';')"


def _keep_entry(kept: List[OldEntry], entry: OldEntry) -> Optional[str]:
    """Add ``entry`` to ``kept`` as the JobRouter did (a name already read is replaced in its place,
    unless the new entry says ``OverrideRoutingEntry = false``); the note to make of it, if any."""
    name = ad_value(entry.ad, "Name")
    earlier = [i for i, e in enumerate(kept) if isinstance(name, str) and name and ad_value(e.ad, "Name") == name]
    if not earlier:
        kept.append(entry)
        return None
    where = f"entry {entry.index + 1} of {entry.knob} is named {name!r}"
    if ad_value(entry.ad, "OverrideRoutingEntry") is False:
        return (f"{where} like an earlier entry and says OverrideRoutingEntry = false: the JobRouter ignored it, "
                "so it is not converted")
    first = kept[earlier[0]]
    kept[earlier[0]] = entry
    return f"{where} like entry {first.index + 1} of {first.knob}: it replaces that one, in its place, as the JobRouter did"


def merged_defaults(text: str, merge: bool) -> classad2.ClassAd:
    """JOB_ROUTER_DEFAULTS as the JobRouter reads it: one ad, or several merged when told to."""
    merged = classad2.ClassAd()
    ads = parse_entries(text, "JOB_ROUTER_DEFAULTS")
    if len(ads) > 1 and not merge:
        ads = ads[:1]
    for ad in ads:
        for key in ad.keys():
            delete_attributes(merged, key)
            merged[key] = ad.lookup(key)
    return merged


def merge(defaults: classad2.ClassAd, entry: classad2.ClassAd) -> classad2.ClassAd:
    """A route as the JobRouter builds it: the defaults, then the entry's attributes over them."""
    route = classad2.ClassAd()
    for ad in (defaults, entry):
        for key in ad.keys():
            delete_attributes(route, key)
            route[key] = ad.lookup(key)
    return route


def _outside_strings(text: str, pattern: "re.Pattern[str]", replacement: str) -> str:
    pieces: List[str] = []
    last = 0
    for string in _STRING.finditer(text):
        pieces.append(pattern.sub(replacement, text[last:string.start()]))
        pieces.append(string.group(0))
        last = string.end()
    pieces.append(pattern.sub(replacement, text[last:]))
    return "".join(pieces)


def _literal(value: object) -> str:
    holder = classad2.ClassAd()
    holder["v"] = value
    return str(holder.lookup("v"))


def inline(route: classad2.ClassAd, expr: classad2.ExprTree, untarget: bool) -> str:
    """``expr`` as it reads without the route: the route's own attributes (``MY.`` or unscoped)
    inlined, what the route does not define of ``MY.`` made ``undefined`` (as it was), and with
    ``untarget`` the ``TARGET.`` scope dropped (the job is now the only scope)."""
    text = str(expr)
    if [r for r in route.internalRefs(expr) if r] or re.search(r"\bmy\.", _STRING.sub('""', text), re.IGNORECASE):
        scope = classad2.ClassAd()
        for key in route.keys():
            scope[key] = route.lookup(key)
        for name in re.findall(r"\bmy\.([A-Za-z_]\w*)", _STRING.sub('""', text), re.IGNORECASE):
            if name not in scope:
                scope[name] = classad2.ExprTree("undefined")
        flat = scope.flatten(expr)
        text = str(flat) if isinstance(flat, classad2.ExprTree) else _literal(flat)
    return _outside_strings(text, _TARGET, "") if untarget else text


def _default_macro(name: str, route: classad2.ClassAd, expr: classad2.ExprTree, evaluate: bool) -> str:
    """The ``default_*`` macro line for a CE default given as ``expr`` (RoutesError: none can say it)."""
    text = inline(route, expr, untarget=True) if evaluate else str(expr)
    tree = classad2.ExprTree(text)
    value = tree.eval() if not [r for r in classad2.ClassAd().externalRefs(tree) if r] else None
    if name == "default_queue":
        if isinstance(value, str):
            return f"{name} = {_literal(value)[1:-1]}"
        raise RoutesError(f"{name} = {text} is an expression, and HTCondor-CE reads default_queue as plain text inside "
                          "a string: not converted (the pilots without a queue get none); write the queue out")
    if isinstance(value, (int, float)) and not isinstance(value, bool) or name == "default_pilot_job_env" and \
            isinstance(value, str):
        return f"{name} = {_literal(value)}"
    return f"{name} = ({text})"


# --------------------------------------------------------------------------------------------
# Converting


def _route_name(value: object, index: int) -> Tuple[str, Optional[str]]:
    if not isinstance(value, str) or not value:
        return f"Route_{index}", f"entry {index} had no name"
    name = re.sub(r"[^A-Za-z0-9_]", "_", value)
    return name, (None if name == value else f"was named {value!r}")


@dataclass
class _RouteParts:
    """What a route's attributes become, gathered one attribute at a time by :func:`convert_entry`."""

    name: str
    route: classad2.ClassAd
    notes: List[str]
    checks: List[str] = field(default_factory=list)
    settings: List[Tuple[int, str]] = field(default_factory=list)
    """Route settings, by their place in :data:`ROUTE_MACROS`."""
    defaults: List[str] = field(default_factory=list)
    """The ``default_*`` macros of HTCondor-CE."""
    kept: List[str] = field(default_factory=list)
    """Any other attribute, kept as a macro of the route."""
    requirements: Optional[str] = None
    edits: Dict[str, List[str]] = field(default_factory=lambda: {keyword: [] for _, keyword in _EDITS})


def convert_entry(route: classad2.ClassAd, index: int, ce: bool = True) -> ConvertedRoute:
    """The ``JOB_ROUTER_ROUTE_<name>`` block for one merged route ad; with ``ce``, with what it needs
    to mean the same behind HTCondor-CE's transforms (:mod:`gahp.routes.ce_meaning`)."""
    name, renamed = _route_name(ad_value(route, "Name"), index)
    parts = _RouteParts(name, route, [f"route {name} {renamed}"] if renamed else [])
    for attr in sorted(route.keys(), key=str.lower):
        _take_attribute(parts, attr, route.lookup(attr))
    if parts.kept:
        parts.notes.append(f"route {name}: kept as macros of the route, which nothing reads unless a statement refers "
                           f"to them: {', '.join(k.split(' = ')[0] for k in parts.kept)}")
    lines = [f"JOB_ROUTER_ROUTE_{name} @=jrt"] + _macro_lines(parts) + _requirements_lines(parts)
    for _, keyword in _EDITS:
        lines += [f"  {e}" for e in parts.edits[keyword]]
    if ce:
        lines += _ce_lines(parts)
    lines.append("@jrt")
    resource = ad_value(route, "GridResource")
    universe = route.eval("TargetUniverse") if "TargetUniverse" in route else 9
    return ConvertedRoute(name, "\n".join(lines), repr(route), tuple(parts.notes),
                          resource if isinstance(resource, str) else "", tuple(parts.checks),
                          universe if isinstance(universe, int) else 9)


def _take_attribute(parts: _RouteParts, attr: str, expr: classad2.ExprTree) -> None:
    """One attribute of the route into ``parts``: a branch per kind of attribute, in the order the
    kinds are told apart."""
    lower = attr.lower()
    ce_edit = _ce_default_edit(lower)
    if lower == "name":
        return
    if lower == "requirements":
        parts.requirements = inline(parts.route, expr, untarget=True)
    elif lower in _MACROS:
        _take_setting(parts, attr, expr)
    elif lower in _CE_DEFAULTS:
        _take_ce_default(parts, _CE_DEFAULTS[lower], expr, evaluate=True)
    elif lower == "default_cerequirements":
        parts.edits["SET"].append(f"SET default_CERequirements {expr}")
        parts.notes.append(f"route {parts.name}: default_CERequirements is read from the job by HTCondor-CE: written "
                           "as SET default_CERequirements (HTCondor's own converter keeps it as a macro, which the CE "
                           "does not read)")
    elif ce_edit is not None:
        if _take_ce_default(parts, ce_edit[0], expr, evaluate=ce_edit[1]):
            parts.notes.append(f"route {parts.name}: {attr} written as the macro {ce_edit[0]}, which HTCondor-CE's "
                               f"transforms read (HTCondor's own converter writes SET {ce_edit[0]}, a job attribute "
                               "the CE ignores)")
    else:
        _take_edit_or_macro(parts, attr, expr)


def _take_setting(parts: _RouteParts, attr: str, expr: classad2.ExprTree) -> None:
    """A route setting (:data:`ROUTE_MACROS`): a bare macro of the same name."""
    macro = _MACROS[attr.lower()]
    parts.settings.append((ROUTE_MACROS.index(macro), f"{macro} = {expr}"))
    if macro == "TargetUniverse" and parts.route.eval(attr) == 5:
        parts.notes.append(f"route {parts.name}: TargetUniverse = 5 kept as the macro HTCondor-CE's WholeNode "
                           "transform reads (HTCondor's own converter writes UNIVERSE 5, which that transform does "
                           "not see: its whole-node pilots would ask for 1 core)")


def _take_ce_default(parts: _RouteParts, macro: str, expr: classad2.ExprTree, evaluate: bool) -> bool:
    """One of HTCondor-CE's route defaults as its ``default_*`` macro; False (and a check) when no
    macro can say it."""
    try:
        parts.defaults.append(_default_macro(macro, parts.route, expr, evaluate=evaluate))
    except RoutesError as e:
        parts.checks.append(str(e))
        return False
    return True


def _take_edit_or_macro(parts: _RouteParts, attr: str, expr: classad2.ExprTree) -> None:
    """An old-syntax edit (``copy_``, ``delete_``, ``set_``, ``eval_set_``) as its statement; any
    other attribute kept as a macro of the same name."""
    try:
        edit = _edit(attr, parts.route, expr, parts.name)
    except RoutesError as e:
        parts.checks.append(f"{e}: not converted")
        return
    if edit is not None:
        parts.edits[edit[0]].append(edit[1])
    else:
        parts.kept.append(f"{attr} = {expr}")


def _macro_lines(parts: _RouteParts) -> List[str]:
    """The route's macros: its settings in :data:`ROUTE_MACROS`' order, the CE's defaults in
    :data:`CE_DEFAULT_MACROS`' order, then the attributes kept."""
    order = [m.lower() for m in CE_DEFAULT_MACROS]
    defaults = sorted(parts.defaults, key=lambda line: order.index(line.split(" = ")[0].lower()))
    return [f"  {m}" for _, m in sorted(parts.settings)] + [f"  {d}" for d in defaults] + [f"  {k}" for k in parts.kept]


def _requirements_lines(parts: _RouteParts) -> List[str]:
    """The route's REQUIREMENTS, if it has any; a check when they refer to a macro the file does not
    define (the JobRouter would drop the route)."""
    if parts.requirements is None:
        return []
    kept_here = sorted(set(re.findall(TOKEN_PREFIX + r"\d+_", parts.requirements)))
    if kept_here:
        parts.checks.append(f"REQUIREMENTS refers to {', '.join(kept_here)}, which this file does not define, and the "
                            "JobRouter expands no macro in a route's REQUIREMENTS (it drops the route as not valid): "
                            "write the value in")
    return [f"  REQUIREMENTS {parts.requirements}"]


def _ce_lines(parts: _RouteParts) -> List[str]:
    """What HTCondor-CE 23.0's route defaults did for the route, as statements (and their notes)."""
    added = ce_statements(parts.route, parts.name)
    if not added.statements:
        return []
    parts.notes.extend(added.notes)
    return (["  # podgahp: what HTCondor-CE 23.0's own route defaults did for this route"]
            + [f"  {statement}" for statement in added.statements])


def _ce_default_edit(lower: str) -> Optional[Tuple[str, bool]]:
    """(macro name, whether the value is an expression to evaluate) for ``set_default_X`` and
    ``eval_set_default_X`` of a CE default; None for anything else."""
    for prefix, evaluate in (("set_", False), ("eval_set_", True)):
        if lower.startswith(prefix) and lower[len(prefix):] in _CE_DEFAULTS:
            return _CE_DEFAULTS[lower[len(prefix):]], evaluate
    return None


def _edit(attr: str, route: classad2.ClassAd, expr: classad2.ExprTree, name: str) -> Optional[Tuple[str, str]]:
    lower = attr.lower()
    for prefix, keyword in reversed(_EDITS):  # eval_set_ before set_: the longer prefix first
        if not lower.startswith(prefix) or len(attr) == len(prefix):
            continue
        target = attr[len(prefix):]
        if lower == "set_default_cerequirements" or lower == "eval_set_default_cerequirements":
            target = "default_CERequirements"
        if keyword == "COPY":
            value = route.eval(attr)
            if not isinstance(value, str) or not value:
                raise RoutesError(f"{attr} must name the attribute to copy to, as a string")
            return keyword, f"COPY {target} {value}"
        if keyword == "DELETE":
            return keyword, f"DELETE {target}"
        if keyword == "EVALSET":
            return keyword, f"EVALSET {target} {inline(route, expr, untarget=True)}"
        return keyword, f"SET {target} {expr}"
    return None


def _entry_comments(old: OldRoutes, count: int) -> Dict[int, List[str]]:
    """Comment lines written inside a ``JOB_ROUTER_ENTRIES @=`` block, by the entry (0-based) they
    are written in or before."""
    found: Dict[int, List[str]] = {}
    for statement in old.statements:
        if statement.knob != "JOB_ROUTER_ENTRIES" or statement.kind != "block":
            continue
        body: List[str] = []
        for index in range(statement.first + 1, statement.last):
            line = old.lines[index]
            if line.strip().startswith("#"):
                done = _complete_ads(" ".join(body))
                found.setdefault(min(done, count - 1), []).append(line.strip())
            else:
                body.append(re.sub(r"\$\([^)]*\)", "0", line))
    return found


def bad_entry_line(lines: Sequence[str], statement: Statement) -> Optional[int]:
    """The (0-based) line where the first entry of the ``JOB_ROUTER_ENTRIES`` statement that is not
    a ClassAd begins, or None when every entry parses."""
    if statement.kind == "block":
        numbered = list(range(statement.first + 1, statement.last))
        texts = [lines[i] for i in numbered]
    else:
        numbered = list(range(statement.first, statement.last + 1))
        texts = [lines[i].rstrip().rstrip("\\") for i in numbered]
        texts[0] = texts[0].split("=", 1)[1] if "=" in texts[0] else ""
    body: List[str] = []
    complete, start = 0, None
    for index, text in zip(numbered, texts):
        if text.strip().startswith("#"):
            continue
        if start is None and text.strip():
            start = index
        body.append(re.sub(r"\$\([^)]*\)", "0", text))
        done = _complete_ads(" ".join(body))
        if done > complete:
            complete, start = done, None
    return start


def _complete_ads(text: str) -> int:
    """How many whole ClassAds ``text`` begins with."""
    count = 0
    try:
        for _ in classad2.parseAds(text, classad2.ParserType.New):
            count += 1
    except Exception:  # noqa: BLE001 - the text may end inside an ad
        pass
    if count and not text.rstrip().endswith("]"):
        count -= 1
    return count


def convert_routes(old: OldRoutes, ce: bool = True) -> Conversion:
    """Rewrite ``old``'s file with its entries as ``JOB_ROUTER_ROUTE_*`` routes (see the module);
    ``ce``: for an HTCondor-CE (the routes keep their meaning behind its transforms)."""
    defaults = merged_defaults(old.defaults, old.merge_defaults) if old.defaults.strip() else classad2.ClassAd()
    entries, replaced, problems = old_entries(old)
    routes = [_restored(r, old.macros) for r in _converted_entries(old.path, defaults, entries, ce)]
    notes: List[str] = replaced + [n for r in routes for n in r.notes] + _file_notes(old, routes)
    blocks: List[str] = ["##  Routes converted from JOB_ROUTER_ENTRIES by podgahp routes convert"
                         + (" (JOB_ROUTER_DEFAULTS merged into each)" if old.defaults.strip() else "") + "."]
    blocks += [CHECK_MARK + p for p in problems]
    if not old.names_in_file:
        blocks += _route_names_lines(routes)
    blocks += _route_blocks(old, entries, routes)
    out = _replace(old, blocks)
    header = ["##  Converted to JOB_ROUTER_ROUTE_* routes by podgahp routes convert; the other lines are",
              "##  those of the original file, which used JOB_ROUTER_ENTRIES.", ""]
    return Conversion("\n".join(header + out).rstrip("\n") + "\n", tuple(routes), tuple(notes), tuple(problems))


def _converted_entries(path: str, defaults: classad2.ClassAd, entries: Sequence[OldEntry],
                       ce: bool) -> List[ConvertedRoute]:
    """Each entry of the file at ``path`` merged with its ``JOB_ROUTER_DEFAULTS`` and converted
    (RoutesError: two entries become routes of one name)."""
    routes: List[ConvertedRoute] = []
    for number, entry in enumerate(entries, start=1):
        route = convert_entry(merge(defaults, entry.ad), number, ce)
        if route.name in {r.name for r in routes}:
            raise RoutesError(f"{path}: two entries become routes named {route.name} (route names keep only "
                              "letters, digits and '_'): rename one")
        routes.append(route)
    return routes


def _file_notes(old: OldRoutes, routes: Sequence[ConvertedRoute]) -> List[str]:
    """The notes of the whole file: the macros it does not define, and each route its own
    ``JOB_ROUTER_ROUTE_NAMES`` leaves out."""
    notes: List[str] = []
    if old.macros.needed:
        notes.append("the routes need from the rest of the configuration: " + ", ".join(old.macros.needed)
                     + " (not defined in this file: kept as $(...) references, which the routes expand where they run)")
    if old.names_in_file:
        listed = {n.upper() for n in LIST_SEPARATORS.split(old.route_names or "") if n}
        notes += [f"route {route.name} is not in the file's JOB_ROUTER_ROUTE_NAMES, so the JobRouter did not "
                  "use it before and does not now; add it to the list to use it"
                  for route in routes if route.name.upper() not in listed]
    return notes


def _route_names_lines(routes: Sequence[ConvertedRoute]) -> List[str]:
    """``JOB_ROUTER_ROUTE_NAMES`` for a file that does not set it: the converted routes first."""
    names = " ".join(r.name for r in routes)
    return ["##  Matched in this order (the old syntax had no order: their REQUIREMENTS should exclude",
            "##  one another). First, so that a catch-all route of an HTCondor-CE batch-system package does",
            "##  not take every pilot; the list is extended only when an earlier file set one.",
            "if defined JOB_ROUTER_ROUTE_NAMES",
            f"  JOB_ROUTER_ROUTE_NAMES = {names} $(JOB_ROUTER_ROUTE_NAMES)",
            "else",
            f"  JOB_ROUTER_ROUTE_NAMES = {names}",
            "endif"]


def _route_blocks(old: OldRoutes, entries: Sequence[OldEntry], routes: Sequence[ConvertedRoute]) -> List[str]:
    """Each route's block after an empty line, the comments written in its entry, its notes and its
    checks."""
    comments = _entry_comments(old, max(1, len(leading_entries(_wrapped(old.entries))[0])))
    blocks: List[str] = []
    for entry, route in zip(entries, routes):
        blocks.append("")
        blocks += comments.get(entry.index, []) if entry.knob == "JOB_ROUTER_ENTRIES" else []
        blocks += [f"##  Note: {n}" for n in route.notes]
        blocks += [CHECK_MARK + c for c in route.checks]
        blocks.append(route.block)
    return blocks


def _restored(route: ConvertedRoute, macros: KeptMacros) -> ConvertedRoute:
    """``route`` with the macros the file does not define back as ``$(...)`` references."""
    if not macros.references:
        return route
    return replace(route, block=macros.restore(route.block), notes=tuple(macros.restore(n) for n in route.notes),
                   grid_resource=macros.restore(route.grid_resource),
                   checks=tuple(macros.restore(c) for c in route.checks))


def _replace(old: OldRoutes, replacement: List[str]) -> List[str]:
    """The file's lines with the last JOB_ROUTER_ENTRIES replaced by ``replacement`` and the other
    knobs of the old syntax commented out."""
    consumed = [s for s in old.statements if s.knob in _CONSUMED and s.kind in ("assign", "block")]
    entries = [s for s in consumed if s.knob in ("JOB_ROUTER_ENTRIES", "JOB_ROUTER_ENTRIES_FILE")]
    where = entries[-1] if entries else None
    by_first = {s.first: s for s in consumed}
    out: List[str] = []
    index = 0
    while index < len(old.lines):
        statement = by_first.get(index)
        if statement is None:
            out.append(old.lines[index])
            index += 1
            continue
        if statement is where:
            out.extend(replacement)
        elif statement.knob == "JOB_ROUTER_ENTRIES" or statement.knob == "JOB_ROUTER_ENTRIES_FILE":
            out.append(f"##  ({statement.knob} of line {statement.first + 1} converted below)")
        else:
            out.append(f"##  ({statement.name} dropped: "
                       + ("merged into the routes below)" if statement.knob == "JOB_ROUTER_DEFAULTS"
                          else "the routes use the new syntax)"))
        index = statement.last + 1
    if where is None:
        out += [""] + replacement
    return out
