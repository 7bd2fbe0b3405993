"""IP addresses as the access rules and the views compare them: one parser, one notion of "this host".

Shared by a rank's access check (``rtdebug.common.access``), the config that validates ``--debug-allow``
(``rtdebug.common.config``) and the store view's "is this rank on my machine?" (``rtdebug.views.store``).
"""

from __future__ import annotations

import ipaddress
import socket

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def ip(text: str) -> IPAddress:
    """An address with any IPv6 zone dropped and IPv4-mapped IPv6 (::ffff:a.b.c.d) as IPv4."""
    addr = ipaddress.ip_address(text.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def parse_allow(spec: str) -> list[IPNetwork]:
    """``"10.0.0.0/8,192.168.1.7"`` -> networks; ValueError naming the bad item."""
    nets = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        try:
            nets.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"{item!r} is not an IP address or CIDR (e.g. 10.0.0.0/8 or 192.168.1.7)") from None
    return nets


def own_addresses() -> set[IPAddress]:
    """Every address on this host's interfaces (in this network namespace)."""
    import psutil  # lazily: only a refused or remote peer pays for it

    out = set()
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family in (socket.AF_INET, socket.AF_INET6):
                try:
                    out.add(ip(a.address))
                except ValueError:
                    pass
    return out


def is_own(address: str) -> bool:
    """True for a loopback or wildcard address or one of this host's own."""
    if address in ("localhost", "0.0.0.0", "::"):
        return True
    try:
        addr = ip(address)
    except ValueError:
        return False
    return addr.is_loopback or addr in own_addresses()
