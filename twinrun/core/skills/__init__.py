"""Skill memory: the SKILL.md record (:mod:`.skill_md`), the repository the curator's three operations act on
(:mod:`.repository`), the operations as tool schemas (:mod:`.functions`), skill folders on disk (:mod:`.folders`)
and BM25 retrieval over the repository (:mod:`.retrieval`).

May import: errors, spec, records.
"""
