"""Rewards and judging: the SkillOS composite reward of a curation rollout (:mod:`.composite`), the correctness
signal the curator reads (:mod:`.correctness`), and the content judges that decide whether a written skill is VALID
(:mod:`.judges`: the rules judge, an OpenAI-compatible judge, and the verdict records of :mod:`.verdicts`).

May import: errors, spec, records, envs, executors (the HTTP client of :mod:`twinrun.core.executors.endpoints`),
skills.
"""
