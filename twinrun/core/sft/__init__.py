"""The SFT study: trajectory records (:mod:`.trajectories`), ScienceWorld SFT data and its loss mask (:mod:`.data`,
statistics in :mod:`.stats`, template copies in :mod:`.template_copy`), the teacher endpoint that plays training
variations (:mod:`.teacher`), one ROSE round's data (:mod:`.rose`) and the agent-evaluation protocol
(:mod:`.agent_eval`).

May import: every other core package (it is the top of core).
"""
