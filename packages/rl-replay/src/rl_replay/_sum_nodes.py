"""Arithmetic on a complete binary sum tree held in one array: node 1 is the root, node i's
children are 2i and 2i + 1, the leaves start at ``n_leaves`` (a power of two) and ``depth``
levels lie below the root.  ``pairs`` is the same array viewed ``[n_leaves, 2]``: row i holds
node i's children.

Each internal node is recomputed as ``left + right`` from its children, never adjusted by a
delta, so sampling never returns a zero-priority leaf.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "descend",
    "propagate_nodes",
    "propagate_range",
    "sample_unique",
    "uniforms",
    "zeroed_overlay",
]

Overlay = list  # per level: (sorted node ids, their private values); see zeroed_overlay


def propagate_range(nodes: np.ndarray, lo: int, hi: int) -> None:
    """Recompute the ancestors of the contiguous nodes ``[lo, hi)`` of the leaf level."""
    while lo > 1:
        lo, hi = lo >> 1, (hi + 1) >> 1
        nodes[lo:hi] = nodes[2 * lo : 2 * hi : 2] + nodes[2 * lo + 1 : 2 * hi : 2]


def propagate_nodes(nodes: np.ndarray, pairs: np.ndarray, leaf_nodes: np.ndarray) -> None:
    """Recompute the ancestors of the given leaf-level nodes (repeats are harmless)."""
    idx = leaf_nodes
    for _ in range(len(pairs).bit_length() - 1):  # (depth)
        idx = idx >> 1
        children = pairs[idx]
        nodes[idx] = children[:, 0] + children[:, 1]


def uniforms(rng: np.random.Generator, n: int, total: float) -> np.ndarray:
    """``n`` values drawn uniformly in ``[0, total)``."""
    values = rng.random(n)
    values *= total
    # Rounding of random() * total could reach total itself; stay strictly below it.
    np.minimum(values, np.nextafter(total, 0.0), out=values)
    return values


def descend(pairs: np.ndarray, values: np.ndarray, overlay: Overlay | None = None) -> np.ndarray:
    """Leaves (0-based) where the cumulative priority reaches each of ``values``.

    At each node the walk goes right when the value is at least the left sum and the
    right sum is positive, so it never enters an all-zero subtree: the leaf reached has a
    positive priority even where rounding left the value above the remaining sum.
    ``overlay`` (from :func:`zeroed_overlay`) replaces some node values by private ones.
    """
    n_leaves = len(pairs)
    idx = np.ones(values.shape, np.int64)
    for level in range(1, n_leaves.bit_length()):
        children = pairs[idx]
        if overlay is not None:
            keys, replacements = overlay[level]
            for side in (0, 1):
                nodes = 2 * idx + side
                pos = np.minimum(np.searchsorted(keys, nodes), len(keys) - 1)
                hit = keys[pos] == nodes
                children[hit, side] = replacements[pos[hit]]
        left = children[:, 0]
        go_right = (values >= left) & (children[:, 1] > 0)
        values -= left * go_right
        idx = 2 * idx + go_right
    return idx - n_leaves


def zeroed_overlay(pairs: np.ndarray, zeroed_leaves: np.ndarray) -> Overlay:
    """Per level, sorted node ids and their values as if ``zeroed_leaves`` were 0.

    The values are recomputed from children exactly as the tree would be, without
    writing to it, so concurrent readers of a shared tree are not disturbed.
    """
    n_leaves = len(pairs)
    depth = n_leaves.bit_length() - 1
    keys = np.unique(zeroed_leaves + n_leaves)
    overlay: Overlay = [None] * (depth + 1)
    overlay[depth] = (keys, np.zeros(len(keys)))
    for level in range(depth, 0, -1):
        child_keys, child_values = overlay[level]
        parents = np.unique(child_keys >> 1)
        children = pairs[parents]
        for side in (0, 1):
            nodes = 2 * parents + side
            pos = np.minimum(np.searchsorted(child_keys, nodes), len(child_keys) - 1)
            hit = child_keys[pos] == nodes
            children[hit, side] = child_values[pos[hit]]
        overlay[level - 1] = (parents, children[:, 0] + children[:, 1])
    return overlay


def sample_unique(pairs: np.ndarray, rng: np.random.Generator, n: int, total: float) -> np.ndarray:
    """``n`` distinct leaves, each drawn proportional to the priorities not drawn yet
    (``total``: the root's sum); the tree is not written to."""
    chosen = np.empty(0, np.int64)
    overlay = None
    remaining = total
    while len(chosen) < n:
        if not remaining > 0:
            raise ValueError(
                f"cannot draw {n} unique samples: only {len(chosen)} slots have a nonzero priority"
            )
        missing = n - len(chosen)
        # Draws with replacement; keeping new leaves in order of first appearance is
        # the same as drawing one at a time without replacement.  Extra draws make
        # a second round rarer.
        draws = descend(pairs, uniforms(rng, 2 * missing, remaining), overlay)
        new, first = np.unique(draws, return_index=True)
        new = new[np.argsort(first, kind="stable")[:missing]]
        chosen = np.concatenate([chosen, new])
        if len(chosen) < n:
            overlay = zeroed_overlay(pairs, chosen)
            remaining = overlay[0][1][0]
    return chosen
