"""Label selectors (full grammar) and field selectors (per-resource supported fields).

Grammar from ``k8s.io/apimachinery/pkg/labels/selector.go``: comma-separated requirements
``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``, ``!k``, ``k>n``, ``k<n``.
Field selectors from ``k8s.io/apimachinery/pkg/fields/selector.go``: ``f=v``, ``f==v``, ``f!=v``.
Parse errors raise :class:`SelectorError` whose text becomes a 400 message.  Owns no state.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SPECIAL = "(),=!<>"

LABEL_VALUE_HELP = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
                    "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
                    "'my_value',  or '12345', regex used for validation is "
                    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
NAME_PART_HELP = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                  "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                  "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")


class SelectorError(ValueError):
    """A selector that does not parse; the text is the 400 message."""


def label_key_error(key: str) -> Optional[str]:
    """Why ``key`` is not a valid label key, or ``None``."""
    prefix, _, name = key.rpartition("/")
    if "/" in prefix:
        return ("a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start "
                "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
                "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS "
                "subdomain prefix and '/' (e.g. 'example.com/MyName')")
    if key.endswith("/") or (key.startswith("/")):
        return "prefix part must be non-empty" if key.startswith("/") else "name part must be non-empty"
    if prefix and (len(prefix) > 253 or not _PREFIX.match(prefix)):
        return "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _NAME.match(name):
        return NAME_PART_HELP
    return None


def label_value_error(value: str) -> Optional[str]:
    if len(value) > 63:
        return "must be no more than 63 characters"
    if value and not _NAME.match(value):
        return LABEL_VALUE_HELP
    return None


Requirement = Tuple[str, str, Tuple[str, ...]]
"""(key, operator, values); operator one of ``in notin exists !exists gt lt``."""


def _tokenize(text: str) -> List[Tuple[str, str]]:
    tokens: List[Tuple[str, str]] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "(),":
            tokens.append((c, c))
            i += 1
        elif text.startswith("==", i) or text.startswith("!=", i):
            tokens.append((text[i:i + 2], text[i:i + 2]))
            i += 2
        elif c in "=!<>":
            tokens.append((c, c))
            i += 1
        else:
            j = i
            while j < len(text) and not text[j].isspace() and text[j] not in _SPECIAL:
                j += 1
            word = text[i:j]
            tokens.append((word if word in ("in", "notin") else "id", word))
            i = j
    return tokens


class LabelSelector:
    """A parsed label selector; the empty selector matches everything."""

    def __init__(self, requirements: Sequence[Requirement]) -> None:
        self.requirements = tuple(requirements)

    @classmethod
    def parse(cls, text: str) -> "LabelSelector":
        tokens = _tokenize(text)
        reqs: List[Requirement] = []
        pos = 0

        def peek() -> Tuple[str, str]:
            return tokens[pos] if pos < len(tokens) else ("end", "")

        def fail(found: Tuple[str, str], expected: str) -> SelectorError:
            what = found[1] if found[0] != "end" else "EOS"
            return SelectorError("unable to parse requirement: found '%s', expected: %s" % (what, expected))

        while pos < len(tokens):
            negate = False
            if peek()[0] == "!":
                negate = True
                pos += 1
            tok = peek()
            if tok[0] not in ("id", "in", "notin"):
                raise fail(tok, "identifier")
            key = tok[1]
            pos += 1
            why = label_key_error(key)
            if why:
                raise SelectorError('unable to parse requirement: key: Invalid value: "%s": %s' % (key, why))
            op_tok = peek()
            if negate:
                if op_tok[0] not in (",", "end"):
                    raise fail(op_tok, "',' or 'end of string'")
                reqs.append((key, "!exists", ()))
            elif op_tok[0] in (",", "end"):
                reqs.append((key, "exists", ()))
            elif op_tok[0] in ("=", "==", "!=", "<", ">"):
                pos += 1
                val_tok = peek()
                if val_tok[0] in ("id", "in", "notin"):
                    value = val_tok[1]
                    pos += 1
                elif val_tok[0] in (",", "end"):
                    value = ""
                else:
                    raise fail(val_tok, "identifier")
                if op_tok[0] in ("<", ">"):
                    if not re.match(r"^-?[0-9]+$", value):
                        raise SelectorError("unable to parse requirement: values[0]: Invalid value: \"%s\": "
                                            "for 'Gt', 'Lt' operators, the value must be an integer" % value)
                    reqs.append((key, "gt" if op_tok[0] == ">" else "lt", (value,)))
                else:
                    _check_value(key, value)
                    reqs.append((key, "notin" if op_tok[0] == "!=" else "in", (value,)))
            elif op_tok[0] in ("in", "notin"):
                pos += 1
                if peek()[0] != "(":
                    raise fail(peek(), "'('")
                pos += 1
                values: List[str] = []
                while True:
                    tok = peek()
                    if tok[0] in ("id", "in", "notin"):
                        values.append(tok[1])
                        pos += 1
                        tok = peek()
                    elif tok[0] in (",", ")"):
                        values.append("")
                    else:
                        raise fail(tok, "',', ')' or identifier")
                    if tok[0] == ",":
                        pos += 1
                        continue
                    if tok[0] == ")":
                        pos += 1
                        break
                    raise fail(tok, "',' or ')'")
                for value in values:
                    _check_value(key, value)
                reqs.append((key, op_tok[0], tuple(values)))
            else:
                raise fail(op_tok, "'=', '!=', '==', 'in', notin'")
            tok = peek()
            if tok[0] == ",":
                pos += 1
                if peek()[0] == "end":
                    raise fail(peek(), "identifier")
            elif tok[0] != "end":
                raise fail(tok, "',' or 'end of string'")
        return cls(reqs)

    def matches(self, labels: Optional[Mapping[str, str]]) -> bool:
        labels = labels or {}
        for key, op, values in self.requirements:
            present = key in labels
            value = labels.get(key)
            if op == "in" and not (present and value in values):
                return False
            if op == "notin" and present and value in values:
                return False
            if op == "exists" and not present:
                return False
            if op == "!exists" and present:
                return False
            if op in ("gt", "lt"):
                try:
                    have = int(value or "")
                except ValueError:
                    return False
                want = int(values[0])
                if (op == "gt" and not have > want) or (op == "lt" and not have < want):
                    return False
        return True


def _check_value(key: str, value: str) -> None:
    why = label_value_error(value)
    if why:
        raise SelectorError('unable to parse requirement: values[0][%s]: Invalid value: "%s": %s'
                            % (key, value, why))


FieldGetter = Callable[[Dict[str, Any]], str]


def _path(*keys: str) -> FieldGetter:
    def get(obj: Dict[str, Any]) -> str:
        cur: Any = obj
        for key in keys:
            cur = cur.get(key) if isinstance(cur, dict) else None
        if isinstance(cur, bool):
            return "true" if cur else "false"
        return "" if cur is None else str(cur)
    return get


_COMMON: Dict[str, FieldGetter] = {"metadata.name": _path("metadata", "name"),
                                   "metadata.namespace": _path("metadata", "namespace")}

SELECTABLE_FIELDS: Dict[str, Dict[str, FieldGetter]] = {
    # pkg/registry/core/pod/strategy.go (ToSelectableFields)
    "pods": dict(_COMMON, **{
        "spec.nodeName": _path("spec", "nodeName"),
        "spec.restartPolicy": _path("spec", "restartPolicy"),
        "spec.schedulerName": _path("spec", "schedulerName"),
        "spec.serviceAccountName": _path("spec", "serviceAccountName"),
        "spec.hostNetwork": lambda obj: "true" if (obj.get("spec") or {}).get("hostNetwork") else "false",
        "status.phase": _path("status", "phase"),
        "status.podIP": _path("status", "podIP"),
        "status.nominatedNodeName": _path("status", "nominatedNodeName"),
    }),
    # pkg/registry/core/secret/strategy.go (SelectableFields)
    "secrets": dict(_COMMON, type=_path("type")),
    "namespaces": dict(_COMMON, **{"status.phase": _path("status", "phase")}),
    "nodes": dict(_COMMON, **{"spec.unschedulable": _path("spec", "unschedulable")}),
    # pkg/registry/core/event/strategy.go (ToSelectableFields)
    "events": dict(_COMMON, **{
        "involvedObject.kind": _path("involvedObject", "kind"),
        "involvedObject.namespace": _path("involvedObject", "namespace"),
        "involvedObject.name": _path("involvedObject", "name"),
        "involvedObject.uid": _path("involvedObject", "uid"),
        "involvedObject.apiVersion": _path("involvedObject", "apiVersion"),
        "involvedObject.resourceVersion": _path("involvedObject", "resourceVersion"),
        "involvedObject.fieldPath": _path("involvedObject", "fieldPath"),
        "reason": _path("reason"),
        "reportingComponent": _path("reportingComponent"),
        "source": _path("source", "component"),
        "type": _path("type"),
    }),
}


class FieldSelector:
    """A parsed field selector bound to one resource's selectable fields."""

    def __init__(self, terms: Sequence[Tuple[FieldGetter, bool, str]]) -> None:
        self.terms = tuple(terms)

    @classmethod
    def parse(cls, text: str, resource: str) -> "FieldSelector":
        fields = SELECTABLE_FIELDS.get(resource, _COMMON)
        terms: List[Tuple[FieldGetter, bool, str]] = []
        for part in _split_unescaped(text):
            if not part:
                continue
            for op in ("!=", "==", "="):
                if op in part:
                    name, _, value = part.partition(op)
                    break
            else:
                raise SelectorError("invalid selector: '%s'; can't understand '%s'" % (text, part))
            name = name.strip()
            if name not in fields:
                raise SelectorError("field label not supported: %s" % name)
            terms.append((fields[name], op == "!=", value.replace("\\,", ",").replace("\\=", "=")))
        return cls(terms)

    def matches(self, obj: Dict[str, Any]) -> bool:
        for getter, negate, value in self.terms:
            if (getter(obj) == value) == negate:
                return False
        return True


def _split_unescaped(text: str) -> List[str]:
    parts: List[str] = []
    cur = ""
    escaped = False
    for c in text:
        if escaped:
            cur += "\\" + c
            escaped = False
        elif c == "\\":
            escaped = True
        elif c == ",":
            parts.append(cur)
            cur = ""
        else:
            cur += c
    parts.append(cur)
    return parts
