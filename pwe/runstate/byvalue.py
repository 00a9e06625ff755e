"""Members failed and done per value of a parameter, counted on a node's state bytes by
arithmetic: in a product of parameters the members of one value are a strided pattern of
the indices (blocks of its stride, one every stride x its count of values), so each value
is a few C-level slices of the state, never a loop over members. ``pwe failures`` (by
value) and the engine's holds (``hold:``) count with it; a million members cost
milliseconds."""

from __future__ import annotations

from typing import Any

from ..base.states import DONE, FAILED, QUARANTINED

_F, _Q, _D = bytes([FAILED]), bytes([QUARANTINED]), bytes([DONE])


def tally(chunk: bytes | bytearray) -> tuple[int, int]:
    """(failed for good, done) among the state bytes ``chunk`` (quarantined counts as failed)."""
    return chunk.count(_F) + chunk.count(_Q), chunk.count(_D)


def strided(state: bytes | bytearray, start: int, period: int, block: int) -> tuple[int, int]:
    """(failed, done) among indices ``start + k*period + j`` (j < block), whichever way is
    fewer slices: one per block, or one strided slice per offset within a block."""
    size = len(state)
    blocks = -(-(size - start) // period)
    f = d = 0
    if block <= blocks:
        parts = (state[start + j::period] for j in range(block))
    else:
        parts = (state[b:b + block] for b in range(start, size, period))
    for part in parts:
        pf, pd = tally(part)
        f += pf
        d += pd
    return f, d


def value_counts(space: Any, state: bytes | bytearray, k: int) -> list[tuple[int, int]]:
    """(failed, done) of each value (by position) of the ``k``-th parameter of ``space``,
    among its first ``space.size`` members (a check's grown members are not counted)."""
    base = state[:space.size]
    n = len(space.values[space.names[k]])
    if space.combine == "zip":
        return [tally(base[p:p + 1]) for p in range(n)]
    block = space.strides[k]
    return [strided(base, p * block, block * n, block) for p in range(n)]
