"""Curation: one curation rollout over a task group, turn by turn (:mod:`.session`), the runtime every session of a
process shares (:mod:`.runtime`: event loop, environment pool, executor, judge), the curator's prompts
(:mod:`.prompts`), its tool call and parser (:mod:`.toolcalls`), what its policy input is made of
(:mod:`.policy_input`), how a position's context is rendered (:mod:`.context_shape`) and the position schedule
both backends drive (:mod:`.positions`). The runtime imports the
session, the session imports the prompts: one way. The names below are the package's public face.

May import: errors, spec, records, envs, executors, skills, rewards, advantages.
"""

from twinrun.core.curation.prompts import CURATOR_INPUT_FIELDS, CuratorPrompts, result_text
from twinrun.core.curation.runtime import CurationRuntime, play_with_repo
from twinrun.core.curation.session import CurationRecord, CurationResult, CurationSession, PositionRecord
from twinrun.core.envs.task_groups import CurationError, TaskGroup, TaskGroupSampler, rollout_episode_seed, stable_int

__all__ = [
    "CURATOR_INPUT_FIELDS", "CurationError", "CurationRecord", "CurationResult", "CurationRuntime", "CurationSession",
    "CuratorPrompts", "PositionRecord", "TaskGroup", "TaskGroupSampler", "play_with_repo", "result_text",
    "rollout_episode_seed", "stable_int",
]
