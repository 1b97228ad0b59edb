"""The harness reads every address a pool's daemons advertise, so that a pool off loopback fails."""

from __future__ import annotations

import pytest

from harness.pool import addresses_of


@pytest.mark.parametrize("text, expected", [
    ("<127.0.0.1:9618?addrs=127.0.0.1-9618&alias=vm&noUDP&sock=schedd_1_2>", ["127.0.0.1", "127.0.0.1"]),
    # IPv6 entries of addrs write their colons as dashes
    ("<[::1]:40000?addrs=[--1]-40000&alias=vm>", ["::1", "::1"]),
    ("<192.0.2.2:9618?addrs=192.0.2.2-9618+[fd00--2]-9618>", ["192.0.2.2", "192.0.2.2", "fd00::2"]),
    # AddressV1, the list form
    ('{[ p="primary"; a="127.0.0.1"; port=9618; n="Internet"; ], [ p="IPv6"; a="fd00::2"; port=1; ]}',
     ["127.0.0.1", "fd00::2"]),
    ("undefined", []),
])
def test_every_advertised_address_is_read(text: str, expected: list) -> None:
    assert addresses_of(text) == expected
