"""Curation: one curation rollout over a task group, turn by turn (:mod:`.session`), the runtime every session of a
process shares (:mod:`.runtime`: event loop, environment pool, executor, judge), the curator's tool call and its
parser (:mod:`.toolcalls`), what the curator's policy input is made of (:mod:`.policy_input`) and how a position's
context is rendered (:mod:`.context_shape`).

May import: errors, spec, records, envs, executors, skills, rewards, advantages.
"""
