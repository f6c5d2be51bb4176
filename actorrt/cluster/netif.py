"""Which network interface TensorPipe should listen on, when nobody said.

TensorPipe's TCP transport listens on ``TP_SOCKET_IFNAME``'s address; without it, on the
address the host name resolves to, and, when that fails, on 127.0.0.1 - which peers on
other machines cannot reach. A multi-node process that was not given
``TP_SOCKET_IFNAME`` therefore uses the interface it reaches the driver through (the
driver: the interface holding the rendezvous address), which is right on every cluster
where the rendezvous and RPC share a network.
"""

from __future__ import annotations

import ipaddress
import os
import socket

__all__ = [
    "apply_socket_ifname",
    "default_socket_ifname",
    "interface_with_address",
    "local_address_towards",
    "unknown_interface",
]


def _family(host: str) -> socket.AddressFamily:
    # A literal IPv6 address (brackets already stripped by parse_tcp_init_method, a zone
    # such as %eth0 allowed) is AF_INET6; names and IPv4 literals are AF_INET, as before.
    try:
        version = ipaddress.ip_address(host.split("%", 1)[0]).version
    except ValueError:
        return socket.AF_INET
    return socket.AF_INET6 if version == 6 else socket.AF_INET


def local_address_towards(host: str, port: int) -> str | None:
    """The local address this machine uses to reach ``host`` (no packet is sent).

    Args:
        host: An IPv4 or IPv6 address, or a name (resolved as IPv4).
        port: The port to reach (0: any).

    Returns:
        The source address the kernel's routing picks (IPv6 for an IPv6 ``host``), or
        None when there is no route.
    """
    family = _family(host)
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((host, port or 9))  # UDP connect only picks a route
            address: str = s.getsockname()[0]
            return address
    except OSError:
        return None


def _same_address(a: str, b: str) -> bool:
    # "fe80::1%eth0" and "fe80::1" name one address; so do "::1" and "0:0:0:0:0:0:0:1".
    try:
        return ipaddress.ip_address(a.split("%", 1)[0]) == ipaddress.ip_address(b.split("%", 1)[0])
    except ValueError:
        return False


def interface_with_address(address: str) -> str | None:
    """The name of the interface that holds ``address``, IPv4 or IPv6 (None if none does).

    Args:
        address: An IPv4 or IPv6 address, or a name (resolved as IPv4).
    """
    if _family(address) == socket.AF_INET:
        try:
            address = socket.gethostbyname(address)
        except OSError:
            return None
    # Imported here, not at the top: imported in every process, psutil slowed actor
    # creation (docs/performance.md); a local cluster never gets here (it says "lo").
    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        for a in addrs:
            if a.family in (socket.AF_INET, socket.AF_INET6) and _same_address(a.address, address):
                return str(name)
    return None


def unknown_interface(name: str) -> str | None:
    """Why ``name`` (``--socket-ifname``) is no interface of this host; None if it is one.

    TensorPipe would fall back to 127.0.0.1 with a warning: unreachable from other hosts,
    so calls would hang there instead of failing at the start.
    """
    import psutil  # here, as in interface_with_address

    interfaces = sorted(psutil.net_if_addrs())
    if name in interfaces:
        return None
    return (
        f"--socket-ifname {name}: no such interface here; this host has "
        f"{', '.join(interfaces)} (`ip -brief addr` shows their addresses)."
    )


def default_socket_ifname(host: str, port: int, *, own_address: bool) -> str | None:
    """``TP_SOCKET_IFNAME`` to use: the environment's, else the one found for ``host``.

    Args:
        host: The rendezvous host (the driver's address).
        port: The rendezvous port.
        own_address: True on the driver (``host`` is one of its addresses).
    """
    if os.environ.get("TP_SOCKET_IFNAME"):
        return os.environ["TP_SOCKET_IFNAME"]
    address = host if own_address else local_address_towards(host, port)
    return interface_with_address(address) if address else None


def apply_socket_ifname(host: str, port: int, *, own_address: bool) -> str | None:
    """Sets ``TP_SOCKET_IFNAME`` and ``GLOO_SOCKET_IFNAME`` before ``init_rpc``.

    ``init_rpc`` also builds a Gloo group (the agents exchange device maps over it), and
    Gloo listens on the address the host name resolves to unless ``GLOO_SOCKET_IFNAME``
    says otherwise: 127.0.x.1 on many distributions, which peers cannot reach. Both get
    the interface of :func:`default_socket_ifname` unless already set.

    Returns:
        The interface TensorPipe will use (None: nothing found, torch's defaults apply).
    """
    # What an earlier cluster of this process set is no choice of the user's: forget it.
    for name, value in _ours.items():
        if os.environ.get(name) == value:
            del os.environ[name]
    _ours.clear()
    ifname = default_socket_ifname(host, port, own_address=own_address)
    if ifname:
        for name in ("TP_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
            if not os.environ.get(name):
                os.environ[name] = _ours[name] = ifname
    return ifname


_ours: dict[str, str] = {}  # variables apply_socket_ifname set (not the user)
