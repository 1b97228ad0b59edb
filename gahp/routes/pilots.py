"""Pilots built to reach each route: a pilot that meets a route's ``REQUIREMENTS`` (and the
JobRouter's source constraint) and none of the routes before it in match order.

Starting from a plain pilot, attributes the expressions refer to are given values taken from the
expressions themselves (their strings and numbers, numbers one either side, a string a
``regexp()`` pattern matches, true and false, or no value) until ``classad2`` evaluates the
whole condition to true; a bounded search, one attribute at a time, then pairs, then triples.
Nothing here runs a tool: the pilots are routed by HTCondor afterwards
(:mod:`gahp.routes.check`), which has the last word.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import classad2

from gahp.routes.samples import Sample

#: Most expression evaluations spent on one route.
MAX_EVALUATIONS = 3000
#: Most attributes of one route's condition given values (the rest keep the plain pilot's).
MAX_ATTRIBUTES = 8

Value = Union[str, int, float, bool, None]
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w.])")
_SCOPE = re.compile(r"^(?:target|my)\.", re.IGNORECASE)


@dataclass(frozen=True)
class RouteCondition:
    """A route's name and its requirements, as the JobRouter lists them ('' when it has none)."""

    name: str
    requirements: str


def _expression(text: str) -> str:
    return f"({text})" if text.strip() else "true"


def condition(route: RouteCondition, earlier: Sequence[RouteCondition], constraint: Optional[str]) -> str:
    """The condition a pilot must meet to be taken by ``route`` when ``earlier`` routes come first."""
    parts = [_expression(constraint or ""), _expression(route.requirements)]
    parts += [f"({_expression(other.requirements)} =!= true)" for other in earlier]
    return " && ".join(parts)


def _regex_example(pattern: str) -> Optional[str]:
    """A string that the simple regular expression ``pattern`` matches, or None if not simple."""
    text = pattern
    if text.startswith("^"):
        text = text[1:]
    if text.endswith("$") and not text.endswith("\\$"):
        text = text[:-1]
    text = text.replace(".*", "").replace(".+", "x")
    text = re.sub(r"\\(.)", r"\1", text)
    if re.search(r"[\[\](){}|?*+]", text) or text == pattern:
        return None
    return text


def _candidates(expression: str) -> List[Value]:
    """Values worth trying, from the literals of ``expression``."""
    values: List[Value] = []
    for literal in _STRING.findall(expression):
        text = classad2.unquote(literal)
        values.append(text)
        example = _regex_example(text)
        if example is not None:
            values.append(example)
    for number in _NUMBER.findall(_STRING.sub('""', expression)):
        found: Union[int, float] = float(number) if "." in number else int(number)
        values += [found, found + 1, found - 1 if found >= 1 else found]
    values += [True, False, None]
    unique: List[Value] = []
    for value in values:
        if not any(type(value) is type(seen) and value == seen for seen in unique):
            unique.append(value)
    return unique


def _attributes(ad: classad2.ClassAd, expression: classad2.ExprTree) -> List[str]:
    names: Dict[str, str] = {}
    for ref in list(ad.internalRefs(expression)) + list(ad.externalRefs(expression)):
        name = _SCOPE.sub("", ref)
        if name and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            names.setdefault(name.lower(), name)
    return list(names.values())[:MAX_ATTRIBUTES]


def _holds(expression: classad2.ExprTree, ad: classad2.ClassAd) -> bool:
    """Whether ``expression`` is true for the pilot ``ad`` (``TARGET.`` references are the pilot's
    too, as in the JobRouter's source constraint; the bindings need a second copy for that)."""
    target = _with(ad, ())
    try:
        return expression.eval(ad, target) is True
    except Exception:  # noqa: BLE001 - the bindings raise bare exception types on evaluation errors
        return False


def meets(text: str, ad: classad2.ClassAd) -> bool:
    """Whether condition ``text`` is true for pilot ``ad``."""
    try:
        return _holds(classad2.ExprTree(text), ad)
    except Exception:  # noqa: BLE001 - the bindings raise bare exception types on parse errors
        return False


def _with(base: classad2.ClassAd, changes: Sequence[Tuple[str, Value]]) -> classad2.ClassAd:
    ad = classad2.ClassAd()
    for key in base.keys():
        ad[key] = base.lookup(key)
    for name, value in changes:
        if value is None:
            if name in ad:
                del ad[name]
        else:
            ad[name] = value
    return ad


def _depths(text: str) -> Iterator[Tuple[int, int]]:
    """(index, bracket depth once past it) of each character of an unparsed expression outside its
    string literals."""
    depth, i, in_string = 0, 0, False
    while i < len(text):
        char = text[i]
        if in_string:
            if char == "\\":
                i += 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        else:
            depth += (char in "([{") - (char in ")]}")
            yield i, depth
        i += 1


def _conjuncts(text: str) -> List[str]:
    """The ``&&`` operands of an unparsed expression, those of bracketed ones too."""
    parts: List[str] = []
    start = 0
    for i, depth in _depths(text):
        if depth == 0 and text.startswith("&&", i) and i >= start:
            parts.append(text[start:i])
            start = i + 2
    parts.append(text[start:])
    out: List[str] = []
    for part in (p.strip() for p in parts):
        closing = next((i for i, depth in _depths(part) if depth == 0), -1)
        if part.startswith("(") and closing == len(part) - 1:
            out += _conjuncts(part[1:-1])
        elif part:
            out.append(part)
    return out


def _search(expressions: Sequence[classad2.ExprTree], focus: classad2.ExprTree, ad: classad2.ClassAd,
            budget: List[int], sizes: Sequence[int]) -> Optional[Tuple[classad2.ClassAd, Tuple[Tuple[str, Value], ...]]]:
    """Changes to ``ad`` (of attributes ``focus`` refers to, values from its literals) under which
    every one of ``expressions`` holds."""
    attributes = _attributes(ad, focus)
    values = _candidates(str(focus))
    for size in sizes:
        for names in itertools.combinations(attributes, size):
            for chosen in itertools.product(values, repeat=size):
                budget[0] -= 1
                if budget[0] < 0:
                    return None
                changes = tuple(zip(names, chosen))
                changed = _with(ad, changes)
                if all(_holds(e, changed) for e in expressions):
                    return changed, changes
    return None


def derive(text: str, base: classad2.ClassAd) -> Optional[Tuple[classad2.ClassAd, Tuple[Tuple[str, Value], ...]]]:
    """A pilot (``base`` with some attributes changed) for which condition ``text`` is true, and
    the changes; None if the bounded search finds none. The condition's ``&&`` operands are met
    one after the other (changing one or two attributes at a time, earlier operands kept true);
    failing that, the whole condition is searched at once."""
    try:
        whole = classad2.ExprTree(text)
        parts = [classad2.ExprTree(part) for part in _conjuncts(str(whole))]
    except Exception:  # noqa: BLE001 - the bindings raise bare exception types on parse errors
        return None
    if _holds(whole, base):
        return base, ()
    budget = [MAX_EVALUATIONS]
    ad, changes = base, ()  # type: classad2.ClassAd, Tuple[Tuple[str, Value], ...]
    for index, part in enumerate(parts):
        if _holds(part, ad):
            continue
        found = _search(parts[:index + 1], part, ad, budget, (1, 2))
        if found is None:
            break
        ad = found[0]
        changes = tuple((n, v) for n, v in changes if n.lower() not in {c[0].lower() for c in found[1]}) + found[1]
    if _holds(whole, ad):
        return ad, changes
    return _search([whole], whole, base, budget, (1, 2, 3))


def describe(changes: Sequence[Tuple[str, Value]]) -> str:
    if not changes:
        return "the plain pilot"
    shown = []
    for name, value in changes:
        if value is None:
            shown.append(f"no {name}")
        else:
            holder = classad2.ClassAd()
            holder["v"] = value
            shown.append(f"{name} = {holder.lookup('v')}")
    return ", ".join(shown)


def pilot_for(route: RouteCondition, earlier: Sequence[RouteCondition], constraint: Optional[str],
              base: Sample, cluster: int) -> Optional[Sample]:
    """A sample pilot built to reach ``route`` (job ``cluster``.0), or None if none was found."""
    base_ad = classad2.parseOne(base.ad, classad2.ParserType.Old)
    found = derive(condition(route, earlier, constraint), base_ad)
    if found is None:
        return None
    ad, changes = found
    ad["ClusterId"] = cluster
    ad["GlobalJobId"] = f"ce.example.org#{cluster}.0#1767225600"
    description = f"built to meet route {route.name}'s REQUIREMENTS: {describe(changes)}"
    return Sample(f"for-{route.name}", description, _long_form(ad))


def _long_form(ad: classad2.ClassAd) -> str:
    return "".join(f"{name} = {ad.lookup(name)}\n" for name in sorted(ad.keys(), key=str.lower))
