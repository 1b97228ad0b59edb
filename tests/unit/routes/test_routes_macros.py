"""Macros a route file does not define: kept as references, named, and given to the proof."""

from __future__ import annotations

from typing import Dict, Optional

import pytest

from gahp.core.errors import RoutesError
from gahp.routes.macros import MAX_MACROS, keep_undefined

#: Raw values as HTCondor would give them for a file that defines SITE and LIMIT (LIMIT refers
#: on to one it does not define).
DEFINED: Dict[str, str] = {"SITE": "example", "LIMIT": "$(SITE_LIMIT) + 1", "FULL_HOSTNAME": "ce.example.org"}


def lookup(name: str) -> Optional[str]:
    return DEFINED.get(name.upper())


def test_what_nothing_defines_is_kept_and_named_and_the_rest_left_to_htcondor() -> None:
    entries = ('[ name = "A"; eval_set_P = $(Pressure); set_S = "$(SITE) $(FULL_HOSTNAME)"; MaxJobs = $(LIMIT);'
               ' set_default_maxMemory = $(MEM:2000); set_Q = $(pressure) ]')
    kept = keep_undefined([entries], lookup)
    assert [(name, reference) for name, _, reference in kept.references] == [
        ("Pressure", "$(Pressure)"), ("MEM", "$(MEM:2000)"), ("SITE_LIMIT", "$(SITE_LIMIT)")]
    assert kept.needed == ("Pressure", "SITE_LIMIT")  # MEM has a default: nothing else need define it
    assert kept.definitions() == "Pressure = podgahp_macro_0_\nMEM = podgahp_macro_1_\nSITE_LIMIT = podgahp_macro_2_\n"
    # For the proof a macro with a default stays undefined, so both forms take its default.
    assert kept.proof_definitions() == "Pressure = podgahp_macro_0_\nSITE_LIMIT = podgahp_macro_2_\n"
    expanded = "EVALSET P podgahp_macro_0_\ndefault_maxMemory = (podgahp_macro_1_)\nMaxJobs = podgahp_macro_2_ + 1"
    assert kept.restore(expanded) == "EVALSET P $(Pressure)\ndefault_maxMemory = ($(MEM:2000))\nMaxJobs = $(SITE_LIMIT) + 1"


def test_a_macro_spelled_with_different_defaults_is_kept_bare() -> None:
    kept = keep_undefined(["$(X:1) $(X:2)"], lookup)
    assert [r[2] for r in kept.references] == ["$(X)"] and kept.needed == ()


def test_tokens_of_ten_and_more_macros_restore_each_its_own() -> None:
    kept = keep_undefined([" ".join(f"$(M{i})" for i in range(12))], lookup)
    text = " ".join(token for _, token, _ in kept.references)
    assert kept.restore(text) == " ".join(f"$(M{i})" for i in range(12))


def test_a_file_of_endless_macros_is_refused() -> None:
    with pytest.raises(RoutesError, match="more than"):
        keep_undefined([" ".join(f"$(M{i})" for i in range(MAX_MACROS + 1))], lookup)


def test_the_ces_own_route_defaults_stay_nothing_as_before() -> None:
    kept = keep_undefined(["$(JOB_ROUTER_DEFAULTS_GENERATED) [ set_default_maxMemory = 128; ]"], lookup)
    assert kept.references == () and kept.needed == ()
