"""What the curator's policy input is made of, and which positions a curator turn stands for.

The curation session (:mod:`twinrun.core.curation.session`) renders the curator input chi_i of each position; both backends
train on the curator's turns. A backend's multi-turn completion holds several curator turns (runs of loss-carrying
tokens), and a position-level advantage (GiGPO) must land on the turn that acted at that position. The rule that
maps turns to positions is here, once, so the TRL tool loop and the verl agent loop apply the same one (backends
never import each other).
"""

from __future__ import annotations

from collections.abc import Sequence


def segment_positions(
    n_segments: int, turns: Sequence[tuple[int | None, int]], group_size: int
) -> list[list[int]]:
    """Positions (1..|G|) whose step advantage each curator turn (model segment) carries.

    Args:
        n_segments: curator turns in the completion (runs of loss-carrying tokens), in order.
        turns: ``(segment, position)`` per ``curate`` call that reached the session, in call order; ``position``
            is the position the call applied to (|G|+1 = a call after the last position, nothing applied).
            ``segment`` None = unknown: then one call per segment is assumed, in order.
        group_size: |G|.

    Returns:
        One list per segment. A segment with calls carries the positions they applied to (|G|+1 is dropped). A
        segment without calls (a turn with no valid tool call, or the closing reply) carries the position whose
        turn was pending when it was written (the one after the last position applied by earlier segments), or
        |G| once every position has had its turn.
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


__all__ = ["segment_positions"]
