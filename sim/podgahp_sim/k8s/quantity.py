"""Resource quantities (``"500m"``, ``"2Gi"``, ``"1e3"``) as exact fractions.

Follows ``k8s.io/apimachinery/pkg/api/resource`` (suffixes, the error message for bad syntax);
owns no state and knows nothing about pods.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any, Optional

QUANTITY_ERROR = ("quantities must match the regular expression "
                  "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")

_NUMBER = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)$")
_EXPONENT = re.compile(r"^[eE]([+-]?[0-9]+)$")
_BINARY = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}
_DECIMAL = {"n": Fraction(1, 10 ** 9), "u": Fraction(1, 10 ** 6), "m": Fraction(1, 1000), "": Fraction(1),
            "k": Fraction(10 ** 3), "M": Fraction(10 ** 6), "G": Fraction(10 ** 9), "T": Fraction(10 ** 12),
            "P": Fraction(10 ** 15), "E": Fraction(10 ** 18)}


class QuantityError(ValueError):
    """Raised for a string that is not a quantity; its text is the API server's message."""


def parse_quantity(text: Any) -> Fraction:
    """Parse a quantity; ints and floats are accepted as the JSON decoder of the server does."""
    if isinstance(text, bool):
        raise QuantityError(QUANTITY_ERROR)
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        return Fraction(str(text))
    if not isinstance(text, str):
        raise QuantityError(QUANTITY_ERROR)
    match = _NUMBER.match(text.strip() if text.strip() == text else "\0")
    if not match:
        raise QuantityError(QUANTITY_ERROR)
    number, suffix = match.group(1), match.group(2)
    value = Fraction(number)
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    if suffix in _DECIMAL:
        return value * _DECIMAL[suffix]
    exp = _EXPONENT.match(suffix)
    if exp:
        return value * Fraction(10) ** int(exp.group(1))
    raise QuantityError(QUANTITY_ERROR)


def try_parse(text: Any) -> Optional[Fraction]:
    try:
        return parse_quantity(text)
    except QuantityError:
        return None


def format_quantity(value: Fraction, binary: bool = False) -> str:
    """Canonical text: ``1``, ``500m``, ``2Gi``, ``1500M`` (close to ``Quantity.String()``)."""
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    value = abs(value)
    if binary and value.denominator == 1:
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            if value.numerator % _BINARY[suffix] == 0:
                return "%s%d%s" % (sign, value.numerator // _BINARY[suffix], suffix)
        return "%s%d" % (sign, value.numerator)
    for suffix in ("E", "P", "T", "G", "M", "k", "", "m", "u", "n"):
        scaled = value / _DECIMAL[suffix]
        if scaled.denominator == 1:
            return "%s%d%s" % (sign, scaled.numerator, suffix)
    scaled = value * 10 ** 9
    return "%s%dn" % (sign, -(-scaled.numerator // scaled.denominator))


def canonical_quantity(text: Any) -> str:
    """A quantity as the API server writes it back once decoded (``Quantity.CanonicalizeBytes`` in the
    format its text had): a binary suffix stays binary (``1024Mi`` -> ``1Gi``) unless the value is
    under 1024 or not whole, an exponent stays an exponent (``1e3``), anything else is decimal
    (``0.5`` -> ``500m``, ``1000`` -> ``1k``)."""
    value = parse_quantity(text)
    match = _NUMBER.match(text) if isinstance(text, str) else None
    suffix = match.group(2) if match else ""
    if suffix in _BINARY and abs(value) >= 1024 and value.denominator == 1:
        return format_quantity(value, True)
    if not _EXPONENT.match(suffix) or value == 0:
        return format_quantity(value)
    sign = "-" if value < 0 else ""
    for exponent in range(18, -12, -3):
        scaled = abs(value) / Fraction(10) ** exponent
        if scaled.denominator == 1:
            return "%s%d%s" % (sign, scaled.numerator, "e%d" % exponent if exponent else "")
    scaled = abs(value) * 10 ** 9
    return "%s%de-9" % (sign, -(-scaled.numerator // scaled.denominator))


def is_binary_resource(resource: str) -> bool:
    """Memory-like resources are printed with binary suffixes."""
    return resource.split(".")[-1] in ("memory", "ephemeral-storage", "storage")
