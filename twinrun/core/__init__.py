"""Backend-agnostic core. Never imports trl, verl, ray, vllm or torch at module level (tests enforce it)."""
