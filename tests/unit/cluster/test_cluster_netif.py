"""netif: which interface holds an address, and the source address towards a host.

Only loopback: the addresses asked about are this machine's own or reserved for
documentation (RFC 5737, RFC 3849), no name but localhost is resolved, and a UDP connect
sends no packet.
"""

from __future__ import annotations

import socket

import psutil
import pytest

from actorrt.cluster.netif import (
    default_socket_ifname,
    interface_with_address,
    local_address_towards,
)


def _lo_has_ipv6() -> bool:
    return any(
        a.family == socket.AF_INET6 and a.address == "::1"
        for a in psutil.net_if_addrs().get("lo", [])
    )


needs_ipv6_lo = pytest.mark.skipif(
    not _lo_has_ipv6(), reason="no IPv6 ::1 on lo here (IPv6 disabled in this kernel/namespace)"
)


@needs_ipv6_lo
def test_ipv6_loopback_is_lo():
    assert interface_with_address("::1") == "lo"
    assert interface_with_address("0:0:0:0:0:0:0:1") == "lo"  # another spelling of ::1


def test_ipv4_addresses_and_names():
    assert interface_with_address("127.0.0.1") == "lo"
    assert interface_with_address("localhost") == "lo"
    # Every IPv4 address of every interface maps back to that interface.
    for name, addrs in psutil.net_if_addrs().items():
        for a in addrs:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                assert interface_with_address(a.address) == name


def test_unknown_addresses_are_none():
    assert interface_with_address("192.0.2.77") is None  # TEST-NET-1
    assert interface_with_address("2001:db8::77") is None  # IPv6 documentation prefix


@needs_ipv6_lo
def test_local_address_towards_ipv6_loopback():
    assert local_address_towards("::1", 29500) == "::1"
    assert local_address_towards("::1", 0) == "::1"


def test_local_address_towards_ipv4_loopback():
    assert local_address_towards("127.0.0.1", 29500) == "127.0.0.1"


@needs_ipv6_lo
def test_default_socket_ifname_for_an_ipv6_driver(monkeypatch):
    monkeypatch.delenv("TP_SOCKET_IFNAME", raising=False)
    assert default_socket_ifname("::1", 29500, own_address=True) == "lo"
    assert default_socket_ifname("::1", 29500, own_address=False) == "lo"
    monkeypatch.setenv("TP_SOCKET_IFNAME", "eth7")
    assert default_socket_ifname("::1", 29500, own_address=False) == "eth7"
