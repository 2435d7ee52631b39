"""Backend-agnostic core. Never imports trl, verl, ray, vllm or torch at module level (tests enforce it).

Core is a house of concept packages, each importing only the ones before it in this order (``tests/test_layers.py``
checks it; docs/layout.md has one line on each):

errors < spec < records < envs < executors < skills < rewards < advantages < curation < sweeps < compare < sft
"""
