"""The TRL backend: ``compile`` (spec -> GRPOConfig kwargs, pure python) and ``train`` (imports TRL when called)."""
