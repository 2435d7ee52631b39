"""One module per CLI command; each defines `register(app: typer.Typer)`.

`twinrun.cli` discovers every module here, so adding a command never edits a shared file. A module imports
heavy dependencies (torch, trl, verl, ray) inside its command function, never at import time.
"""
