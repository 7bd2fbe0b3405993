"""The Ray cluster's side of the registry: entries in the GCS internal KV, namespace ``rtdebug``.

Keys: ``session/<sid>`` and ``rank/<sid>/<rank>`` (and ``dump/<sid>/...``: job-wide ``stacks``);
values are registry-schema JSON (mode ``ray``), signed with the run's secret (``rtdebug.registry.signing``) when
the writer has one. Anyone who reaches the GCS can write here too: readers take
values as raw key -> bytes and check each one. Workers and the controller write through the connected
``ray.experimental.internal_kv``; the CLI reads through a bare ``GcsClient`` on
the cluster address, as ``ray status`` does: no ``ray.init``, no driver job of
its own, reachable from any machine that reaches the GCS.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rtdebug.registry import signing

NAMESPACE = "rtdebug"


def session_key(sid: str) -> str:
    return f"session/{sid}"


def rank_key(sid: str, rank: int) -> str:
    return f"rank/{sid}/{rank}"


class _KV:
    """Shared logic; subclasses give ``_put/_get_many/_keys/_del``. ``secret``: sign what is written."""

    secret: str | None = None

    def _put(self, key: str, value: bytes) -> None:
        raise NotImplementedError

    def _get_many(self, keys: list[bytes]) -> dict[bytes, bytes]:
        raise NotImplementedError

    def _keys(self, prefix: str) -> list[bytes]:
        raise NotImplementedError

    def _del(self, key: str, prefix: bool) -> None:
        raise NotImplementedError

    def _put_entry(self, key: str, entry: Mapping[str, Any]) -> None:
        self._put(key, json.dumps(signing.sign(key, entry, self.secret)).encode())

    def put_raw(self, key: str, value: bytes) -> None:
        """A value signed by its maker (a dump request or answer: ``rtdebug.stacks.wire``)."""
        self._put(key, value)

    def get_raw(self, key: str) -> bytes | None:
        """One value, unparsed (one request to the GCS: a worker polls this)."""
        return next(iter(self._get_many([key.encode()]).values()), None)

    def put_session(self, entry: Mapping[str, Any]) -> None:
        self._put_entry(session_key(entry["session_id"]), entry)

    def write_rank(self, entry: Mapping[str, Any]) -> None:
        """Same name as ``Registry.write_rank``, so ``bootstrap.RankState`` writes here unchanged."""
        self._put_entry(rank_key(entry["session_id"], entry["rank"]), entry)

    def delete_session(self, sid: str) -> None:
        self._del(f"rank/{sid}/", prefix=True)
        self._del(f"dump/{sid}/", prefix=True)
        self._del(session_key(sid), prefix=False)

    def delete_key(self, key: str) -> None:
        self._del(key, prefix=False)

    def raw(self, prefix: str) -> dict[str, bytes]:
        """Every value under ``prefix``, by key, unparsed (a reader checks each one)."""
        keys = self._keys(prefix)
        if not keys:
            return {}
        out = {}
        for k, v in self._get_many(keys).items():
            if v is not None:
                out[k.decode(errors="replace") if isinstance(k, bytes) else str(k)] = v
        return out


def parse(value: bytes) -> Any:
    """A KV value as JSON, or None if it is not JSON."""
    try:
        return json.loads(value)
    except (ValueError, RecursionError):  # junk, or nested deeper than the parser goes
        return None


class ConnectedKV(_KV):
    """Inside the cluster (workers, controller): the process is already connected."""

    def __init__(self, secret: str | None = None) -> None:
        from ray.experimental import internal_kv

        self.kv = internal_kv
        self.secret = secret

    def _put(self, key: str, value: bytes) -> None:
        self.kv._internal_kv_put(key, value, overwrite=True, namespace=NAMESPACE)

    def _get_many(self, keys: list[bytes]) -> dict[bytes, bytes]:
        return {k: self.kv._internal_kv_get(k, namespace=NAMESPACE) for k in keys}

    def _keys(self, prefix: str) -> list[bytes]:
        keys: list[bytes] = self.kv._internal_kv_list(prefix, namespace=NAMESPACE)
        return keys

    def _del(self, key: str, prefix: bool) -> None:
        self.kv._internal_kv_del(key, del_by_prefix=prefix, namespace=NAMESPACE)


class ClientKV(_KV):
    """From outside (the CLI): a GCS client on the cluster address."""

    def __init__(self, address: str, timeout_s: float = 10.0) -> None:
        from ray._raylet import GcsClient  # type: ignore[attr-defined]  # compiled module, no stub

        try:  # a cluster with token auth: send the token when one is available, as ray.init() does
            from ray._private.authentication.authentication_token_setup import (
                maybe_enable_token_auth_if_token_available,
            )

            maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
        except ImportError:
            pass
        self.address = address
        self.timeout = timeout_s
        self.gcs = GcsClient(address=address)

    def _put(self, key: str, value: bytes) -> None:
        self.gcs.internal_kv_put(key.encode(), value, True, NAMESPACE.encode(), timeout=self.timeout)

    def _get_many(self, keys: list[bytes]) -> dict[bytes, bytes]:
        got: dict[bytes, bytes] = self.gcs.internal_kv_multi_get(
            keys, namespace=NAMESPACE.encode(), timeout=self.timeout
        )
        return got

    def _keys(self, prefix: str) -> list[bytes]:
        keys: list[bytes] = self.gcs.internal_kv_keys(
            prefix.encode(), namespace=NAMESPACE.encode(), timeout=self.timeout
        )
        return keys

    def _del(self, key: str, prefix: bool) -> None:
        self.gcs.internal_kv_del(key.encode(), prefix, namespace=NAMESPACE.encode(), timeout=self.timeout)


def connected(secret: str | None = None) -> ConnectedKV:
    return ConnectedKV(secret)
