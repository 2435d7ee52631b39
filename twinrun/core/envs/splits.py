"""How many held-out games an environment's evaluation split holds: the longest stream a sweep can play.

A stream is the protocol's held-out games played in order through one repository (docs/streams.md), so the split's
size caps the games per stream that a design (`twinrun design`) may name. Constants, no engine: a design is made
before any data is downloaded.
"""

from __future__ import annotations

# ALFWorld: the games alfworld's AlfredTWEnv.collect_game_files keeps from a full alfworld-download (json_2.1.1),
# which :func:`twinrun.core.envs.alfworld.alfworld_game_files` reproduces and `twinrun doctor` counts: valid_seen
# 140, valid_unseen 134 (the in- and out-of-distribution evaluation sets of Shridhar et al., ALFWorld, ICLR 2021).
# Counted over every task type; a spec that keeps some types plays a subset of these.
ALFWORLD_HELD_OUT = {"valid_seen": 140, "valid_unseen": 134}


def held_out_games(env: str, split: str) -> int | None:
    """Games in `split` of environment `env` (spec names: alfworld, sciworld, null_env); None where the size is not
    known without the environment itself (ScienceWorld lists its variations only from a running simulator; the
    null stand-in and ALFWorld's training split are not held out)."""
    if env == "alfworld":
        return ALFWORLD_HELD_OUT.get(split)
    return None
