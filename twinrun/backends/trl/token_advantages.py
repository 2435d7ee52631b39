"""Per-token advantages for TRL's multi-turn completions (pure numpy; GiGPO's per-position spans).

A TRL tool-loop completion is one token sequence: the curator's turn 1, the tool result (chi_2, masked out by
``tool_mask``), turn 2, ... So the curator's turns are the maximal runs of loss-carrying tokens
(``completion_mask * tool_mask == 1``). Segment ``r`` is the ``r``-th assistant message, and the broker logged which
position each ``curate`` call of which segment applied to; this module turns that into a ``(B, T)`` advantage.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def model_segments(mask: np.ndarray) -> list[list[tuple[int, int]]]:
    """Maximal runs of 1 in each row of ``mask`` [B, T] (0/1): per row a list of half-open ``(start, end)``."""
    m = np.asarray(mask).astype(np.int8)
    if m.ndim != 2:
        raise ValueError(f"mask: shape {m.shape} is not (B, T)")
    padded = np.pad(m, ((0, 0), (1, 1)))
    diff = np.diff(padded, axis=1)  # +1 at a run start, -1 one past its end
    out: list[list[tuple[int, int]]] = []
    for row in diff:
        starts = np.flatnonzero(row == 1)
        ends = np.flatnonzero(row == -1)
        out.append([(int(s), int(e)) for s, e in zip(starts, ends, strict=True)])
    return out


def segment_positions(
    n_segments: int, turns: Sequence[tuple[int | None, int]], group_size: int
) -> list[list[int]]:
    """Positions (1..|G|) whose step advantage each model segment carries.

    turns: ``(segment, position)`` per ``curate`` call that reached the session, in call order (segment None =
    unknown: then one call per segment is assumed, in order). A segment with calls carries the positions they
    applied to (|G|+1, a call after the last position, is dropped). A segment without calls (a turn with no valid
    tool call, or the closing reply) carries the position whose turn was pending when it was written (the one
    after the last position applied by earlier segments), or |G| once every position has had its turn.
    """
    if any(s is None for s, _ in turns):
        turns = [(i, p) for i, (_, p) in enumerate(turns)]
    by_segment: dict[int, list[int]] = {}
    for s, p in turns:
        by_segment.setdefault(int(s), []).append(int(p))  # type: ignore[arg-type]
    out: list[list[int]] = []
    last = 0  # last position applied by earlier segments
    for r in range(n_segments):
        applied = [p for p in by_segment.get(r, []) if 1 <= p <= group_size]
        if applied:
            out.append(applied)
            last = max(last, max(applied))
        else:
            out.append([min(last + 1, group_size)])
    return out


def spread_advantages(
    spans: Sequence[Sequence[tuple[int, int]]],
    positions: Sequence[Sequence[Sequence[int]]],
    per_position: np.ndarray,
    width: int,
) -> np.ndarray:
    """(B, T) advantages: each segment's tokens get the mean of its positions' advantages.

    spans[b]: segments of row b; positions[b][r]: positions of segment r; per_position [B, |G|] (position p at
    column p-1). Tokens outside every segment (prompt padding, tool results, padding) get 0; they carry no loss."""
    adv = np.zeros((len(spans), width), dtype=np.float64)
    for b, (row_spans, row_pos) in enumerate(zip(spans, positions, strict=True)):
        if len(row_spans) != len(row_pos):
            raise ValueError(f"row {b}: {len(row_spans)} segments but {len(row_pos)} position lists")
        for (s, e), ps in zip(row_spans, row_pos, strict=True):
            adv[b, s:e] = float(np.mean([per_position[b, p - 1] for p in ps]))
    return adv
