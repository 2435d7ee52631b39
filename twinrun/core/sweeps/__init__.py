"""Checkpoint sweeps: the plan and its manifest (:mod:`.plan`), playing every checkpoint arm and a no-memory
baseline on the held-out games (:mod:`.sweep`), the same over Ray (:mod:`.ray_tasks`), the paired skill lift of
training rollouts (:mod:`.skill_lift`) and the input checks a sweep or train runs before its first write
(:mod:`.preflight`; a checkpoint's files loadable: :mod:`.checkpoint_check`).

May import: errors, spec, records, envs, executors, skills, rewards, advantages, curation.
"""
