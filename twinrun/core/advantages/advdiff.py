"""`twinrun advdiff`: the same rewards under several frameworks' advantage semantics, side by side. Pure.

Input (JSON lines), one object per step row::

    {"group": str, "trajectory": str, "step": int, "reward": float|null, "anchor": str|null, "valid": bool}

``anchor`` and ``valid`` are optional (default null / true); other keys are ignored. A ``rollouts.jsonl`` row of a
twinrun training run (``"kind": "curation_rollout"``, core.curation.CurationRecord) is accepted too and becomes one
step row per curator position (see :func:`_curation_steps`), so ``advdiff RUN/rollouts.jsonl`` works.
A trajectory's episode reward is the sum of its step rewards (single-step data: one row per trajectory).
``reward: null`` marks an unmeasured step: its whole trajectory is unmeasured (excluded from every statistic,
advantage 0 under every preset).

Output (:meth:`AdvdiffResult.to_json`)::

    {"rows":    [{"group", "trajectory", "step", "<preset>": advantage, ...}],     # input order
     "groups":  [{"group", "rows", "trajectories",
                  "diffs": [{"a": preset, "b": preset, "max_abs": float, "mean_abs": float}, ...]}],
     "presets": {"<preset>": {"description", "source", "knobs": {...}}}}

``diffs`` has one entry per unordered pair of presets (in the order given), over the rows of that group.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from twinrun.core.advantages import PRESETS, advantages_for_rows
from twinrun.core.advantages.anchors import ANCHOR_KINDS, AnchorError, record_anchors
from twinrun.core.errors import TwinrunError

DEFAULT_PRESETS = ("trl", "verl", "verl_agent_gigpo", "twinrun_paper")


class AdvdiffInputError(TwinrunError, ValueError):
    """An advdiff input that cannot be used; one line naming file, line number, field, value and fix."""


@dataclass(frozen=True)
class AdvdiffInput:
    """Parsed step rows, all arrays [B] in file order; ``lines`` are the 1-based source line numbers."""

    groups: list[str]
    trajectories: list[str]
    steps: np.ndarray  # int64[B]
    rewards: np.ndarray  # float64[B], NaN = unmeasured
    anchors: list[str | None]
    valid: np.ndarray  # bool[B]
    lines: np.ndarray  # int64[B]

    def __len__(self) -> int:
        return len(self.groups)


def _label(value: Any, field: str, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise AdvdiffInputError(
            f"{where}: field {field!r}: {value!r} is not a string (fix: a string id, e.g. \"{field[0]}1\")"
        )
    return str(value)


def parse_rows(lines: list[str], source: str = "<input>", anchor: str | None = None) -> AdvdiffInput:
    """Validate and parse advdiff JSON lines (see module docstring). Raises AdvdiffInputError on the first bad line.

    anchor: re-key the GiGPO anchors of rollouts.jsonl rows to this ``algorithm.gigpo.anchor`` kind
    (core.anchors.record_anchors); None keeps the anchors as recorded."""
    if anchor is not None and anchor not in ANCHOR_KINDS:
        raise AdvdiffInputError(f"--anchor: {anchor!r} is not an anchor (fix: one of {', '.join(ANCHOR_KINDS)})")
    acc: tuple[list, ...] = ([], [], [], [], [], [], [])  # groups, trajs, steps, rewards, anchors, valid, lines
    traj_group: dict[str, tuple[str, int]] = {}
    seen: dict[tuple[str, int], int] = {}
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        where = f"{source}:{n}"
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as e:
            raise AdvdiffInputError(f"{where}: not JSON: {e.msg} (fix: one JSON object per line)") from None
        if not isinstance(obj, dict):
            raise AdvdiffInputError(f"{where}: a JSON {type(obj).__name__}, not an object (fix: one object per line)")
        for obj in _curation_steps(obj, where, anchor) if obj.get("kind") == "curation_rollout" else [obj]:
            _add_row(obj, where, n, acc, traj_group, seen)
    groups, trajs, steps, rewards, anchors, valid, linenos = acc
    if not groups:
        raise AdvdiffInputError(f"{source}: no rows (fix: one JSON object per step row)")
    return AdvdiffInput(
        groups, trajs, np.asarray(steps, dtype=np.int64), np.asarray(rewards, dtype=np.float64), anchors,
        np.asarray(valid, dtype=bool), np.asarray(linenos, dtype=np.int64),
    )


def _curation_steps(rec: dict[str, Any], where: str, anchor: str | None = None) -> list[dict[str, Any]]:
    """A rollouts.jsonl row of a twinrun training run (core.curation.CurationRecord) as one step row per position:
    group = "<group_id>@<training step>", trajectory = "<group>/r<rollout_index>", step = position, reward = that
    position's step reward (null when the rollout is unmeasured), anchor = the recorded GiGPO anchor (or re-keyed
    to ``anchor``), valid = the turn applied a valid operation."""
    try:
        group = f"{rec['group_id']}@{rec['step']}"
        traj = f"{group}/r{rec['rollout_index']}"
        positions = rec["positions"]
        total = rec["reward"]["total"]
        step_rewards = rec["step_rewards"]
    except (KeyError, TypeError) as e:
        raise AdvdiffInputError(
            f"{where}: curation_rollout record lacks {e} (fix: a rollouts.jsonl row written by twinrun train)"
        ) from None
    if total is not None and len(step_rewards) != len(positions):
        raise AdvdiffInputError(
            f"{where}: field 'step_rewards': {len(step_rewards)} values for {len(positions)} positions "
            "(fix: one step reward per position)"
        )
    try:
        anchors = record_anchors(rec, anchor) if anchor is not None else [
            p.get("anchor") if isinstance(p, dict) else None for p in positions]
    except (AnchorError, KeyError, TypeError) as e:
        raise AdvdiffInputError(f"{where}: cannot re-key to --anchor {anchor}: {e}") from None
    return [
        {
            "group": group, "trajectory": traj, "step": p.get("index", i) if isinstance(p, dict) else i,
            "reward": None if total is None else step_rewards[i],
            "anchor": anchors[i],
            "valid": not p.get("no_valid_call", False) if isinstance(p, dict) else True,
        }
        for i, p in enumerate(positions)
    ]


def _add_row(obj: dict[str, Any], where: str, n: int, acc: tuple[list, ...], traj_group: dict, seen: dict) -> None:
    groups, trajs, steps, rewards, anchors, valid, linenos = acc
    for field in ("group", "trajectory", "step", "reward"):
        if field not in obj:
            raise AdvdiffInputError(
                f"{where}: missing field {field!r} (fix: every row needs group, trajectory, step, reward)"
            )
    group = _label(obj["group"], "group", where)
    traj = _label(obj["trajectory"], "trajectory", where)
    step = obj["step"]
    if isinstance(step, bool) or not isinstance(step, int):
        raise AdvdiffInputError(f"{where}: field 'step': {step!r} is not an integer (fix: 0, 1, 2, ...)")
    reward = obj["reward"]
    if reward is None:
        reward = math.nan  # unmeasured, allowed
    elif isinstance(reward, bool) or not isinstance(reward, (int, float)):
        raise AdvdiffInputError(
            f"{where}: field 'reward': {reward!r} is not a number (fix: a float, or null if unmeasured)"
        )
    elif not math.isfinite(reward):
        raise AdvdiffInputError(
            f"{where}: field 'reward': {reward!r} is not finite (fix: a finite float, or null if unmeasured)"
        )
    anchor = obj.get("anchor")
    if anchor is not None and not isinstance(anchor, str):
        raise AdvdiffInputError(f"{where}: field 'anchor': {anchor!r} is not a string (fix: a string or null)")
    ok = obj.get("valid", True)
    if not isinstance(ok, bool):
        raise AdvdiffInputError(f"{where}: field 'valid': {ok!r} is not a boolean (fix: true or false)")
    if traj in traj_group and traj_group[traj][0] != group:
        first_group, first_line = traj_group[traj]
        raise AdvdiffInputError(
            f"{where}: trajectory {traj!r} is in group {group!r} but line {first_line} put it in group "
            f"{first_group!r} (fix: a trajectory belongs to one group)"
        )
    traj_group.setdefault(traj, (group, n))
    if (traj, step) in seen:
        raise AdvdiffInputError(
            f"{where}: duplicate (trajectory, step) = ({traj!r}, {step}), first on line {seen[(traj, step)]} "
            "(fix: one row per step)"
        )
    seen[(traj, step)] = n
    groups.append(group)
    trajs.append(traj)
    steps.append(step)
    rewards.append(float(reward))
    anchors.append(anchor)
    valid.append(ok)
    linenos.append(n)


def load_rows(path: str | Path, anchor: str | None = None) -> AdvdiffInput:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise AdvdiffInputError(f"{p}: cannot be read ({e.strerror}; fix: pass an existing JSONL file)") from None
    return parse_rows(text.splitlines(), str(p), anchor)


def resolve_presets(names: str | list[str] | tuple[str, ...]) -> list[str]:
    """'trl,verl' or a list -> validated preset names (order kept, duplicates dropped)."""
    items = [x.strip() for x in (names.split(",") if isinstance(names, str) else names) if x.strip()]
    if not items:
        raise AdvdiffInputError(f"--presets: {names!r} names no preset (fix: e.g. {','.join(DEFAULT_PRESETS)})")
    for x in items:
        if x not in PRESETS:
            raise AdvdiffInputError(f"--presets: {x!r} is not a preset (fix: one of {', '.join(PRESETS)})")
    return list(dict.fromkeys(items))


@dataclass(frozen=True)
class AdvdiffResult:
    data: AdvdiffInput
    presets: list[str]
    advantages: dict[str, np.ndarray]  # preset -> float64[B]
    group_names: list[str]  # first-appearance order
    group_rows: np.ndarray  # int[G]
    group_trajectories: np.ndarray  # int[G]
    diffs: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]  # (a, b) -> (max_abs[G], mean_abs[G])

    def to_json(self) -> dict[str, Any]:
        d = self.data
        cols = {p: self.advantages[p].tolist() for p in self.presets}
        rows = []
        for i in range(len(d)):
            row: dict[str, Any] = {"group": d.groups[i], "trajectory": d.trajectories[i], "step": int(d.steps[i])}
            row.update({p: cols[p][i] for p in self.presets})
            rows.append(row)
        groups = []
        for gi, name in enumerate(self.group_names):
            groups.append({
                "group": name,
                "rows": int(self.group_rows[gi]),
                "trajectories": int(self.group_trajectories[gi]),
                "diffs": [
                    {"a": a, "b": b, "max_abs": float(mx[gi]), "mean_abs": float(mn[gi])}
                    for (a, b), (mx, mn) in self.diffs.items()
                ],
            })
        presets = {
            p: {"description": PRESETS[p].description, "source": PRESETS[p].source, "knobs": PRESETS[p].config.knobs()}
            for p in self.presets
        }
        return {"rows": rows, "groups": groups, "presets": presets}


def compute_table(data: AdvdiffInput, presets: list[str]) -> AdvdiffResult:
    """Advantages of every row under every preset, and per-group max/mean |difference| for each preset pair."""
    names = resolve_presets(presets)
    adv = {
        p: advantages_for_rows(
            PRESETS[p].config, step_rewards=data.rewards, group_ids=data.groups, traj_ids=data.trajectories,
            step_index=data.steps, anchors=data.anchors, valid=data.valid,
        )
        for p in names
    }
    import pandas as pd  # factorize keeps first-appearance order of group names

    gcode, gnames = pd.factorize(np.asarray(data.groups, dtype=object))
    k = len(gnames)
    rows = np.bincount(gcode, minlength=k)
    tcode, _ = pd.factorize(np.asarray(data.trajectories, dtype=object))
    _, first = np.unique(tcode, return_index=True)
    trajs = np.bincount(gcode[first], minlength=k)
    diffs: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
    for a, b in combinations(names, 2):
        d = np.abs(adv[a] - adv[b])
        mx = np.zeros(k)
        np.maximum.at(mx, gcode, d)
        diffs[(a, b)] = (mx, np.bincount(gcode, weights=d, minlength=k) / rows)
    return AdvdiffResult(data, names, adv, [str(x) for x in gnames], rows, trajs, diffs)
