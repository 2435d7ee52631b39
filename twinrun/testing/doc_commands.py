"""The command lines the docs show, read and checked against the real CLI (issue 43: docs that run as written).

`shell_lines` finds the command lines of a page (```bash blocks, inline `code` spans that start with a command);
`twinrun_calls` splits a line into twinrun argument lists; `check_call` parses one list with the command's own
click parser (required arguments and options included, placeholders such as SPEC or DIR substituted by a value of
the option's type) and every `--set FIELD=VALUE` through the spec's field list, and returns what fails, one line
each. Nothing runs: parsing stops before the command's function is called.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

PLACEHOLDER = re.compile(r"^(<[^>]+>|[A-Z][A-Z0-9_]*(\.\.\.)?|[A-Z][A-Z0-9_]*@[A-Z0-9_]+|\.\.\.)$")
SAMPLE = {"INTEGER": "1", "FLOAT": "0.5"}


def shell_lines(text: str) -> list[str]:
    """The command lines of a page: each ```bash block's lines (continuations joined, comments and blank lines
    dropped, ``$VAR`` expanded from the block's own ``VAR=value`` lines) and every inline `code` span that starts
    with a command (twinrun, .venv/bin/twinrun, make, python -m)."""
    out: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        variables: dict[str, str] = {}
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #", 1)[0].strip()
            if not line or line.startswith("#"):
                continue
            m = re.fullmatch(r"([A-Z_]+)=(\S+)", line)
            if m:
                variables[m.group(1)] = m.group(2)
                continue
            out.append(re.sub(r"\$([A-Z_]+)", lambda v: variables.get(v.group(1), v.group(0)), line))
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    # an inline span may wrap onto the next line of a paragraph (never across a blank line)
    spans = (" ".join(s.split()) for s in re.findall(r"`([^`]+)`", prose) if "\n\n" not in s)
    out += [span for span in spans if re.match(r"(\.venv/bin/)?twinrun |make [a-z]|python -m twinrun|--set ", span)]
    return out


def twinrun_calls(line: str) -> list[list[str]]:
    """The argument lists of the twinrun invocations on one line (``[--opt X]`` brackets flattened to words; a
    ``a|b`` choice stays one word, read as its first alternative by `check_call`)."""
    calls: list[list[str]] = []
    if not re.search(r"(^|\s)(\S*/)?twinrun\s", line):  # e.g. python -c "from twinrun.core ... ; ...": no CLI call
        return calls
    for part in re.split(r"&&|;|\|\||\s\|\s", line):
        words = shlex.split(part.replace("[", " ").replace("]", " ").replace("\\|", "|"), posix=True)
        for i, w in enumerate(words):
            if w in ("twinrun", ".venv/bin/twinrun", "$(BIN)/twinrun"):
                calls.append(words[i + 1:])
                break
    return calls


def resolve(root: Any, args: list[str]) -> tuple[Any, list[str], list[str]]:
    """(command, its path, the remaining args) for a twinrun argument list; groups need their subcommand."""
    cmd, path, rest = root, [], list(args)
    while hasattr(cmd, "commands"):  # a group (typer's own click classes: no isinstance against click.Group)
        if not rest or rest[0] not in cmd.commands:
            raise LookupError(f"twinrun {' '.join(path)}: {rest[:1]} is not one of {sorted(cmd.commands)}")
        path.append(rest[0])
        cmd, rest = cmd.commands[rest[0]], rest[1:]
    return cmd, path, rest


def _option_types(cmd: Any) -> dict[str, str]:
    from twinrun.commands._reference import _type_name

    return {o: ("flag" if getattr(p, "is_flag", False) else _type_name(p))
            for p in cmd.params for o in (*p.opts, *p.secondary_opts)}


def substitute(cmd: Any, rest: list[str]) -> list[str]:
    """Placeholders (SPEC, DIR, <folder>, RUN@STEP, ...) become a value of their option's type; ``a|b`` becomes
    ``a``; a bare ``...`` (more of the same) is dropped."""
    types = _option_types(cmd)
    out: list[str] = []
    for i, w in enumerate(rest):
        if w == "...":
            continue
        if "|" in w and not w.startswith("--"):
            w = w.split("|", 1)[0]
        prev = rest[i - 1] if i else ""
        if PLACEHOLDER.match(w) or (w.startswith("<") and w.endswith(">")):
            w = SAMPLE.get(types.get(prev, ""), w.strip("<>.").lower() or "x")
        out.append(w)
    return out


def spec_field_problems(sets: list[str], spec_file: Path | None) -> list[str]:
    """Each ``--set`` names a spec field (or an ``overrides.<backend>.`` knob); when no value is a placeholder, the
    fields load together through the spec loader on the named spec (the smoke spec when it names none)."""
    from twinrun.core.spec import ExperimentSpec, load_spec
    from twinrun.core.spec.loading import _all_field_paths

    fields = set(_all_field_paths(ExperimentSpec))
    problems = []
    for s in sets:
        key, eq, value = s.partition("=")
        if not eq:
            problems.append(f"--set {s}: not FIELD=VALUE")
        elif key not in fields and not key.startswith("overrides.") and not PLACEHOLDER.match(key):
            problems.append(f"--set {s}: {key} is not a spec field")
    if problems or any(PLACEHOLDER.match(s.partition("=")[2]) for s in sets) or not sets:
        return problems
    try:
        load_spec(spec_file, sets)
    except Exception as e:  # noqa: BLE001 - the loader's one line is the finding
        return [f"--set {' --set '.join(sets)}: {e}"]
    return []


def check_call(root: Any, args: list[str], repo_root: Path) -> list[str]:
    """What fails when the argument list is parsed as the CLI would parse it (empty: it parses)."""
    try:
        cmd, path, rest = resolve(root, args)
    except LookupError as e:
        return [str(e)]
    if not rest:  # `twinrun compare` in a sentence names the command; it is not a line to run
        return []
    rest = substitute(cmd, rest)
    problems: list[str] = []
    sets = []
    for i, w in enumerate(rest):
        if w == "--set" and i + 1 < len(rest):
            sets.append(rest[i + 1])
            nxt = rest[i + 2] if i + 2 < len(rest) else ""
            if re.match(r"^[a-z_][\w.]*=", nxt):
                problems.append(f"--set {rest[i + 1]} {nxt}: one field per --set (fix: --set {nxt})")
    try:
        ctx = cmd.make_context("twinrun " + " ".join(path), list(rest), resilient_parsing=False)
        ctx.close()
    except Exception as e:  # noqa: BLE001 - click's usage errors (missing, unknown, extra, bad value)
        msg = e.format_message() if hasattr(e, "format_message") else str(e)
        if type(e).__name__ != "Exit":  # --help parses and exits 0
            problems.append(f"{type(e).__name__}: {msg}")
    spec_file = next((repo_root / w for w in rest if w.endswith((".yaml", ".yml")) and (repo_root / w).is_file()),
                     repo_root / "experiments" / "smoke-cpu.yaml")
    problems += spec_field_problems(sets, spec_file)
    return problems


def set_fragment_problems(span: str, repo_root: Path) -> list[str]:
    """An inline ``--set a=1 --set b=2`` fragment (options to add to a command): one field per --set, each a
    spec field."""
    words = shlex.split(span)
    problems, sets = [], []
    for i, w in enumerate(words):
        if w == "--set" and i + 1 < len(words):
            sets.append(words[i + 1])
        elif w != "--set" and (i == 0 or words[i - 1] != "--set") and re.match(r"^[a-z_][\w.]*=", w):
            problems.append(f"{w}: one field per --set (fix: --set {w})")
    # field names only: a fragment's values belong to a command line the prose describes (or to a refusal it shows)
    return problems + spec_field_problems([f"{s.partition('=')[0]}=X" for s in sets], repo_root)


def heading_anchors(text: str) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation but hyphens dropped, spaces as hyphens."""
    out: set[str] = set()
    for h in re.findall(r"^#{1,6}\s+(.+?)\s*$", re.sub(r"```.*?```", "", text, flags=re.S), re.M):
        slug = re.sub(r"[^\w\- ]", "", h.strip().lower().replace("`", "")).replace(" ", "-")
        base, n = slug, 1
        while slug in out:
            slug, n = f"{base}-{n}", n + 1
        out.add(slug)
    return out


def broken_links(page: Path, text: str) -> list[str]:
    """Relative links (a file, a file#anchor, #anchor) whose file or heading does not exist."""
    problems = []
    for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"```.*?```", "", text, flags=re.S)):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file) if file else page
        if not dest.exists():
            problems.append(f"link {target}: {file} does not exist")
        elif anchor and dest.suffix == ".md" and anchor not in heading_anchors(dest.read_text(encoding="utf-8")):
            problems.append(f"link {target}: no heading #{anchor} in {file or page.name}")
    return problems
