"""Union-find's one step that every grouping here needs, written once."""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")


def find_root(parent: dict[K, K], x: K) -> K:
    """The representative of ``x`` in the forest ``parent`` (each key maps to its parent, a root to
    itself); halves the path on the way."""
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x
