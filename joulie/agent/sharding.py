"""Which pool replica serves which node: a stable hash of the node name, modulo the replicas.

The hash must not depend on the process (Python's ``hash`` of a string is salted per process), and
a replica's shard comes from the ordinal a StatefulSet gives its pod name (``joulie-agent-pool-1``
serves shard 1), so every replica agrees on the split without talking to the others.
"""

from __future__ import annotations

import hashlib
import re

_ORDINAL = re.compile(r"-(\d+)$")


def shard_of(node: str, shards: int) -> int:
    """The shard (0 .. shards-1) that serves ``node``."""
    digest = hashlib.blake2b(node.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def ordinal(pod_name: str) -> int | None:
    """The StatefulSet ordinal at the end of ``pod_name``; None when it has none."""
    found = _ORDINAL.search(pod_name)
    return int(found.group(1)) if found else None
