"""`twinrun compare`: paired statistics of checkpoint arms against a same-sweep baseline, and a stated,
tested verdict on whether two runs' checkpoint curves share a shape.

Inputs are either per-game arms (rows written by `twinrun sweep`: one row per game per arm) or published
per-checkpoint summaries (CSV ``run,checkpoint,n,successes[,b,c]``, ``run=<baseline>`` rows give the baseline).
Per-game arms support every statistic; summaries only those that counts support, and the output lists what was
skipped or approximated.

What is computed (the math lives in :mod:`twinrun.core.compare_stats`):
- per arm vs baseline: exact McNemar on the discordant games b, c; the lift (arm - baseline success rate over
  games measured in both) with a paired bootstrap CI over games; the minimum detectable effect at the stated
  power; Holm, Benjamini-Hochberg and Bonferroni within each declared family (default: one family per run).
- per run (its lifts over checkpoints): peak checkpoint and the bootstrap distribution of the argmax, strict
  sign changes of the lift (crossings of the baseline), final - peak, linear trend, Cochran's Q across
  checkpoints, the curve's reliability (share of between-checkpoint variance that is not sampling noise) and,
  when replicate arms exist, the test-retest correlation of the curve with its replicate.
- per pair of runs: Pearson and Spearman of per-checkpoint lifts with a bootstrap that resamples games jointly
  across all arms, noise ceilings, a run x checkpoint interaction test with game effects, and a verdict.

Unmeasured rows (infrastructure failures) are excluded from every denominator and counted; an arm with more
than `max_unmeasured_share` unmeasured rows is flagged. Arms from different sweeps or game lists are refused.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from twinrun.core import compare_stats as cs
from twinrun.core.errors import TwinrunError

COMPARE_SCHEMA_VERSION = 1

AGREE = "shapes agree"
DIFFER = "shapes differ"
NO_EVIDENCE = "no evidence either way at this sample size"


class CompareError(TwinrunError, ValueError):
    """Inputs that cannot be compared (one line: what, which value, fix)."""


@dataclass(frozen=True)
class CompareSettings:
    alpha: float = 0.05
    power: float = 0.8
    level: float = 0.95
    n_boot: int = 10_000
    seed: int = 0
    max_unmeasured_share: float = 0.1
    family: str = "run"  # "run": one multiplicity family per run; "all": every checkpoint arm in one family

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise CompareError(f"alpha: {self.alpha} must be in (0, 1) (fix: e.g. 0.05)")
        if not 0 < self.power < 1:
            raise CompareError(f"power: {self.power} must be in (0, 1) (fix: e.g. 0.8)")
        if not 0 < self.level < 1:
            raise CompareError(f"level: {self.level} must be in (0, 1) (fix: e.g. 0.95)")
        if self.n_boot < 100:
            raise CompareError(f"n_boot: {self.n_boot} is too few resamples (fix: 1000 or more, default 10000)")
        if not 0 <= self.max_unmeasured_share <= 1:
            raise CompareError(f"max_unmeasured_share: {self.max_unmeasured_share} must be in [0, 1] (fix: e.g. 0.1)")
        if self.family not in ("run", "all"):
            raise CompareError(f"family: {self.family!r} is not a family rule (fix: 'run' or 'all')")


# ------------------------------------------------------------------------------------------------------------
# Input model


@dataclass
class ArmInfo:
    """One evaluated arm. `run` is the curve it belongs to (None for baseline arms)."""

    name: str
    run: str | None
    checkpoint: int | None
    replicate: int = 0
    role: str = "checkpoint"  # "checkpoint" | "baseline"
    n_unmeasured: int = 0
    n_missing: int = 0
    # published summaries only
    n: int | None = None
    successes: int | None = None
    b: int | None = None
    c: int | None = None


@dataclass
class GameTable:
    """Per-game outcomes of every arm of one sweep: outcomes[A, G] in {1, 0, NaN}."""

    arms: list[ArmInfo]
    outcomes: np.ndarray
    game_ids: list[str]
    sweep_id: str | None = None
    games_hash: str | None = None
    task_types: list[str] = field(default_factory=list)


@dataclass
class SummaryTable:
    """Published per-checkpoint counts (no per-game outcomes)."""

    arms: list[ArmInfo]
    source: str = ""


# ------------------------------------------------------------------------------------------------------------
# Loading


def _arm_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted((path / "arms").glob("*.jsonl")) if (path / "arms").is_dir() else sorted(path.glob("*.jsonl"))
        if not files:
            raise CompareError(f"input: {str(path)!r} holds no arm files (fix: pass a sweep --out folder or arm .jsonl files)")
        return files
    if path.suffix == ".jsonl":
        return [path]
    raise CompareError(f"input: {str(path)!r} is neither a sweep folder, a .jsonl arm nor a .csv summary (fix: check the path)")


def load_game_table(paths: Sequence[str | Path]) -> GameTable:
    """Read per-game eval rows (sweep output) from sweep folders and/or arm JSONL files."""
    from twinrun.core.records import read_jsonl

    files: list[Path] = []
    for p in paths:
        pp = Path(p)
        if not pp.exists():
            raise CompareError(f"input: {str(pp)!r} does not exist (fix: pass a sweep --out folder, arm .jsonl or .csv)")
        files.extend(_arm_files(pp))
    rows_by_arm: dict[str, dict[str, dict[str, Any]]] = {}
    meta: dict[str, dict[str, Any]] = {}
    sweep_of: dict[str, str] = {}
    hash_of: dict[str, str] = {}
    n_games_of: dict[str, int] = {}
    games: dict[int, tuple[str, str]] = {}
    seen_files: set[Path] = set()
    for f in files:
        if f.resolve() in seen_files:
            continue
        seen_files.add(f.resolve())
        for n, row in enumerate(read_jsonl(f), 1):
            if row.get("kind") != "eval":
                continue
            for key in ("arm", "game_id", "game_index", "outcome", "sweep_id", "games_hash", "n_games"):
                if key not in row:
                    raise CompareError(f"{f}:{n}: eval row lacks {key!r} (fix: rows must come from `twinrun sweep`)")
            arm = row["arm"]
            if row["outcome"] not in ("success", "failure", "unmeasured"):
                raise CompareError(f"{f}:{n}: outcome {row['outcome']!r} is not success/failure/unmeasured")
            sweep_of.setdefault(arm, row["sweep_id"])
            hash_of.setdefault(arm, row["games_hash"])
            n_games_of.setdefault(arm, int(row["n_games"]))
            if row["sweep_id"] != sweep_of[arm] or row["games_hash"] != hash_of[arm]:
                raise CompareError(
                    f"{f}:{n}: arm {arm!r} mixes rows of sweeps {sweep_of[arm]!r} and {row['sweep_id']!r} "
                    "(fix: keep one sweep per --out folder)"
                )
            per = rows_by_arm.setdefault(arm, {})
            if row["game_id"] in per:
                raise CompareError(
                    f"{f}:{n}: arm {arm!r} has game {row['game_id']!r} twice (fix: a sweep never writes duplicates; "
                    "do not pass the same arm from two files)"
                )
            per[row["game_id"]] = row
            meta.setdefault(arm, row)
            games.setdefault(int(row["game_index"]), (row["game_id"], row.get("task_type") or ""))
    if not rows_by_arm:
        raise CompareError(f"input: no eval rows in {', '.join(map(str, paths))} (fix: run `twinrun sweep` first)")
    _refuse_mixed_sweeps(sweep_of, hash_of)
    n_games = max(n_games_of.values())
    game_ids = [games[i][0] if i in games else f"<unplayed #{i}>" for i in range(n_games)]
    task_types = [games[i][1] if i in games else "" for i in range(n_games)]
    index = {g: i for i, g in enumerate(game_ids)}
    arms: list[ArmInfo] = []
    out = np.full((len(rows_by_arm), n_games), np.nan)
    for a, (name, per) in enumerate(sorted(rows_by_arm.items(), key=lambda kv: _arm_sort_key(meta[kv[0]]))):
        m = meta[name]
        unmeasured = 0
        for gid, row in per.items():
            if gid not in index:
                raise CompareError(f"arm {name!r}: game {gid!r} is not in the sweep's game list (fix: rerun the sweep)")
            if row["outcome"] == "unmeasured":
                unmeasured += 1
            else:
                out[a, index[gid]] = 1.0 if row["outcome"] == "success" else 0.0
        arms.append(ArmInfo(
            name=name, run=m.get("run"), checkpoint=m.get("checkpoint_step"), replicate=int(m.get("replicate") or 0),
            role=m.get("role") or ("baseline" if m.get("run") is None else "checkpoint"),
            n_unmeasured=unmeasured, n_missing=n_games - len(per),
        ))
    return GameTable(arms, out, game_ids, next(iter(sweep_of.values())), next(iter(hash_of.values())), task_types)


def _arm_sort_key(row: dict[str, Any]) -> tuple:
    return (row.get("run") is not None, str(row.get("run") or ""), row.get("checkpoint_step") or -1,
            int(row.get("replicate") or 0), row["arm"])


def _refuse_mixed_sweeps(sweep_of: dict[str, str], hash_of: dict[str, str]) -> None:
    sweeps = sorted(set(sweep_of.values()))
    if len(sweeps) > 1:
        by = {s: sorted(a for a, v in sweep_of.items() if v == s)[:3] for s in sweeps}
        desc = "; ".join(f"sweep {s!r}: {', '.join(a)}" for s, a in by.items())
        raise CompareError(
            f"arms come from {len(sweeps)} different sweeps ({desc}); pairing needs one sweep and its own baseline "
            "(fix: evaluate all runs in one `twinrun sweep`)"
        )
    hashes = sorted(set(hash_of.values()))
    if len(hashes) > 1:
        raise CompareError(
            f"arms were played on {len(hashes)} different game lists ({', '.join(hashes)}) "
            "(fix: compare arms of one sweep, which plays one game list)"
        )


def _int_field(value: str, name: str, where: str, *, optional: bool = False) -> int | None:
    v = (value or "").strip()
    if v == "" and optional:
        return None
    try:
        out = int(v)
    except ValueError:
        raise CompareError(f"{where}: {name}={value!r} is not an integer (fix: write a whole number)") from None
    if out < 0:
        raise CompareError(f"{where}: {name}={out} is negative (fix: counts are >= 0)")
    return out


def load_summary_csv(path: str | Path, baseline: str) -> SummaryTable:
    """Read published per-checkpoint summaries: columns run,checkpoint,n,successes[,b,c]."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise CompareError(f"input: {str(p)!r} cannot be read ({e.strerror}; fix: pass an existing CSV)") from None
    reader = csv.DictReader(text.splitlines())
    cols = [c.strip() for c in (reader.fieldnames or [])]
    missing = [c for c in ("run", "checkpoint", "n", "successes") if c not in cols]
    if missing:
        raise CompareError(f"{p}: column {missing[0]!r} is missing (fix: header run,checkpoint,n,successes[,b,c])")
    arms: list[ArmInfo] = []
    seen: set[tuple[str, int | None]] = set()
    for line, raw in enumerate(reader, 2):
        row = {k.strip(): (v or "").strip() for k, v in raw.items() if k is not None}
        where = f"{p}:{line}"
        run = row["run"]
        if not run:
            raise CompareError(f"{where}: run is empty (fix: name the run, or {baseline!r} for the baseline)")
        is_base = run == baseline
        ck = _int_field(row["checkpoint"], "checkpoint", where, optional=is_base)
        n = _int_field(row["n"], "n", where)
        s = _int_field(row["successes"], "successes", where)
        b = _int_field(row.get("b", ""), "b", where, optional=True)
        c = _int_field(row.get("c", ""), "c", where, optional=True)
        assert n is not None and s is not None
        if n == 0:
            raise CompareError(f"{where}: n=0 (fix: a summary row needs at least one measured game)")
        if s > n:
            raise CompareError(f"{where}: successes={s} exceeds n={n} (fix: successes <= n)")
        if (b is None) != (c is None):
            raise CompareError(f"{where}: only one of b, c is given (fix: give both discordant counts or neither)")
        if b is not None and c is not None and b + c > n:
            raise CompareError(f"{where}: b + c = {b + c} exceeds n={n} (fix: discordant games are a subset of n)")
        key = (run, None if is_base else ck)
        if key in seen:
            raise CompareError(f"{where}: run={run!r} checkpoint={ck} appears twice (fix: one row per run and checkpoint)")
        seen.add(key)
        name = baseline if is_base else f"{run}@{ck}"
        arms.append(ArmInfo(name=name, run=None if is_base else run, checkpoint=None if is_base else ck,
                            role="baseline" if is_base else "checkpoint", n=n, successes=s, b=b, c=c))
    bases = [a for a in arms if a.role == "baseline"]
    if len(bases) != 1:
        raise CompareError(
            f"{p}: {len(bases)} rows with run={baseline!r} (fix: exactly one baseline row, or pass --baseline NAME)"
        )
    if len(arms) < 2:
        raise CompareError(f"{p}: no checkpoint rows besides the baseline (fix: add run,checkpoint rows)")
    return SummaryTable(arms, str(p))


# ------------------------------------------------------------------------------------------------------------
# Entry point


def compare(inputs: Sequence[str | Path], baseline: str = "baseline", settings: CompareSettings | None = None) -> dict[str, Any]:
    """Compare arms (sweep folders / arm JSONL) or published summaries (CSV) against `baseline`.

    Returns the JSON-able result (`--json` prints it; `write_report` renders it).
    """
    settings = settings or CompareSettings()
    if not inputs:
        raise CompareError("inputs: none given (fix: pass a sweep --out folder, arm .jsonl files or a summary .csv)")
    paths = [Path(p) for p in inputs]
    csvs = [p for p in paths if p.suffix.lower() == ".csv"]
    if csvs and len(csvs) != len(paths):
        raise CompareError("inputs: mix of summary CSVs and per-game arms (fix: compare one kind at a time)")
    if len(csvs) > 1:
        raise CompareError(f"inputs: {len(csvs)} summary CSVs (fix: put all runs and the baseline in one CSV)")
    if csvs:
        return compare_summaries(load_summary_csv(csvs[0], baseline), baseline, settings)
    return compare_games(load_game_table(paths), baseline, settings)


# ------------------------------------------------------------------------------------------------------------
# Per-game comparison


def _split_baseline(arms: list[ArmInfo], baseline: str) -> int:
    names = [a.name for a in arms]
    if baseline not in names:
        raise CompareError(
            f"--baseline: {baseline!r} is not an arm here (fix: one of {', '.join(sorted(names)[:8])})"
        )
    return names.index(baseline)


def _family(arm: ArmInfo, settings: CompareSettings) -> str | None:
    if arm.role != "checkpoint" or arm.replicate != 0:
        return None  # replicates and baseline replicates measure noise; they are not hypotheses
    return "all" if settings.family == "all" else f"run:{arm.run}"


def compare_games(table: GameTable, baseline: str, settings: CompareSettings) -> dict[str, Any]:
    """All statistics on per-game outcomes (see module docstring)."""
    base_i = _split_baseline(table.arms, baseline)
    y = table.outcomes
    base = y[base_i]
    n_games = y.shape[1]
    others = [i for i in range(len(table.arms)) if i != base_i]
    arms = [table.arms[i] for i in others]
    ya = y[others]
    rng = np.random.default_rng(settings.seed)
    idx = cs.resample_indices(n_games, settings.n_boot, rng)
    w = cs.index_counts(idx, n_games)

    pc = cs.paired_counts(ya, base)
    ones = np.ones((1, n_games))
    lift = cs.weighted_means(pc.diff, pc.mask, ones)[0]
    boot_lift = cs.weighted_means(pc.diff, pc.mask, w)  # [R, A]
    lo, hi = cs.percentile_ci(boot_lift, settings.level)
    base_mask = ~np.isnan(base)
    base_rate = float(np.nanmean(base)) if base_mask.any() else float("nan")
    boot_base = cs.weighted_means(np.nan_to_num(base)[None, :], base_mask[None, :], w)[:, 0]
    blo, bhi = cs.percentile_ci(boot_base, settings.level)
    pvals = np.array([cs.mcnemar_exact(b, c) for b, c in zip(pc.b, pc.c)])
    with np.errstate(invalid="ignore", divide="ignore"):
        p_disc = (pc.b + pc.c) / np.maximum(pc.n_pairs, 1)
    mde = cs.mde_paired(pc.n_pairs, p_disc, settings.alpha, settings.power)
    fams = [_family(a, settings) for a in arms]
    adj = cs.adjust_pvalues(pvals, fams)

    flags: list[str] = []
    base_arm = table.arms[base_i]
    for a in [base_arm, *arms]:
        share = a.n_unmeasured / max(n_games - a.n_missing, 1)
        if share > settings.max_unmeasured_share:
            flags.append(f"{a.name}: {a.n_unmeasured} of {n_games - a.n_missing} rows unmeasured ({share:.0%} > "
                         f"{settings.max_unmeasured_share:.0%}); its lift may be biased by which games failed")
        if a.n_missing:
            flags.append(f"{a.name}: {a.n_missing} of {n_games} games not played (sweep incomplete; rerun to resume)")

    arm_rows = []
    for j, a in enumerate(arms):
        measured = int((~np.isnan(ya[j])).sum())
        arm_rows.append({
            "arm": a.name, "run": a.run, "checkpoint": a.checkpoint, "replicate": a.replicate, "role": a.role,
            "family": fams[j], "n_games": n_games, "n_measured": measured, "n_unmeasured": a.n_unmeasured,
            "n_missing": a.n_missing, "unmeasured_share": a.n_unmeasured / max(n_games - a.n_missing, 1),
            "flagged": any(f.startswith(a.name + ":") for f in flags),
            "n_pairs": int(pc.n_pairs[j]),
            "success_rate": float(np.nanmean(ya[j])) if measured else None,
            "baseline_rate_paired": (float(pc.base_successes[j] / pc.n_pairs[j]) if pc.n_pairs[j] else None),
            "lift": lift[j], "lift_ci": [lo[j], hi[j]], "ci_method": "paired bootstrap over games",
            "b": int(pc.b[j]), "c": int(pc.c[j]), "test": "exact McNemar (binomial on b, c)",
            "p_value": pvals[j], "p_holm": adj["holm"][j], "p_bh": adj["bh"][j], "p_bonferroni": adj["bonferroni"][j],
            "mde": mde[j],
        })

    runs, curves = _run_curves(arms, lift, boot_lift, settings, rng, ya=ya, adj_holm=adj["holm"])
    pairs = [_pair_games(ra, rb, curves, arms, ya, n_games, settings) for ra, rb in combinations(sorted(curves), 2)]

    result = {
        "schema_version": COMPARE_SCHEMA_VERSION, "kind": "comparison", "source": "per-game",
        "sweep_id": table.sweep_id, "games_hash": table.games_hash, "n_games": n_games,
        "settings": _settings_dict(settings),
        "baseline": {"arm": baseline, "n_measured": int(base_mask.sum()), "n_unmeasured": base_arm.n_unmeasured,
                     "n_missing": base_arm.n_missing, "success_rate": base_rate, "ci": [blo, bhi]},
        "arms": arm_rows, "runs": runs, "pairs": pairs, "flags": flags, "skipped": [],
    }
    if not any(a.replicate > 0 for a in arms):
        result["skipped"].append("test-retest ceiling: no replicate arms in this sweep (sweep --replicates adds them)")
    return _clean(result)


@dataclass
class _Curve:
    run: str
    steps: np.ndarray  # [K]
    arm_idx: np.ndarray  # [K] indices into the arm list
    lifts: np.ndarray  # [K]
    boot: np.ndarray  # [R, K]
    reliability: float
    test_retest: float | None = None


def _run_curves(arms: list[ArmInfo], lift: np.ndarray, boot_lift: np.ndarray, settings: CompareSettings,
                rng: np.random.Generator, *, ya: np.ndarray | None,
                adj_holm: np.ndarray) -> tuple[dict[str, Any], dict[str, _Curve]]:
    runs: dict[str, Any] = {}
    curves: dict[str, _Curve] = {}
    run_names = sorted({a.run for a in arms if a.role == "checkpoint" and a.run is not None})
    for run in run_names:
        prim = [(a.checkpoint, j) for j, a in enumerate(arms) if a.run == run and a.replicate == 0 and a.role == "checkpoint"]
        prim = [(s, j) for s, j in sorted(prim, key=lambda t: (t[0] is None, t[0])) if np.isfinite(lift[j])]
        if not prim:
            runs[run] = {"checkpoints": [], "note": "no checkpoint with measured games"}
            continue
        steps = np.array([s for s, _ in prim], dtype=np.float64)
        jj = np.array([j for _, j in prim])
        L = lift[jj]
        B = boot_lift[:, jj]
        k = len(jj)
        peak = int(np.argmax(L))
        share = cs.argmax_distribution(B, rng)
        lo, hi = cs.percentile_ci(B, settings.level)
        fmp_boot = B[:, -1] - np.nanmax(B, axis=1) if k else np.array([np.nan])
        slope = float(cs.linear_slope(steps, L)) if k >= 2 else None
        slope_boot = cs.linear_slope(steps, B) if k >= 2 else None
        rel = cs.reliability(L, B)
        entry: dict[str, Any] = {
            "arms": [arms[j].name for j in jj],
            "checkpoints": [int(s) for s in steps],
            "lifts": L.tolist(),
            "lift_ci": [[a, b] for a, b in zip(lo.tolist(), hi.tolist())],
            "peak_checkpoint": int(steps[peak]), "peak_lift": float(L[peak]),
            "peak_share": float(share[peak]),
            "argmax_distribution": {str(int(s)): float(v) for s, v in zip(steps, share)},
            "crossings": int(cs.strict_sign_changes(L)),
            "final_minus_peak": float(L[-1] - L[peak]),
            "final_minus_peak_ci": list(cs.percentile_ci(fmp_boot, settings.level)),
            "trend_per_step": slope,
            "trend_ci": list(cs.percentile_ci(slope_boot, settings.level)) if slope_boot is not None else None,
            "reliability": rel,
            "significant_holm": [int(steps[i]) for i, j in enumerate(jj) if adj_holm[j] < settings.alpha],
        }
        if ya is not None:
            entry["cochran_q"] = cs.cochran_q(ya[jj].T) if k >= 2 else None
        curve = _Curve(run, steps, jj, L, B, rel)
        # test-retest: the same checkpoints evaluated again (replicate 1) in this sweep
        reps = {a.checkpoint: j for j, a in enumerate(arms) if a.run == run and a.replicate == 1}
        shared = [(i, reps[int(s)]) for i, s in enumerate(steps) if int(s) in reps and np.isfinite(lift[reps[int(s)]])]
        if len(shared) >= 3:
            i0 = np.array([i for i, _ in shared])
            i1 = np.array([j for _, j in shared])
            r_tt = float(cs.row_pearson(L[i0], lift[i1]))
            r_boot = cs.row_pearson(B[:, i0], boot_lift[:, i1])
            entry["test_retest"] = {"r": r_tt, "ci": list(cs.percentile_ci(r_boot, settings.level)),
                                    "checkpoints": [int(steps[i]) for i in i0]}
            curve.test_retest = r_tt
        else:
            entry["test_retest"] = None
        runs[run] = entry
        curves[run] = curve
    return runs, curves


def _shared(ca: _Curve, cb: _Curve) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    common = np.intersect1d(ca.steps, cb.steps)
    ia = np.searchsorted(ca.steps, common)
    ib = np.searchsorted(cb.steps, common)
    return common, ia, ib


def _ceilings(ca: _Curve, cb: _Curve) -> tuple[float | None, float | None]:
    tt = [r for r in (ca.test_retest, cb.test_retest) if r is not None]
    ceiling_tt = None
    if tt:
        # a run without replicates is assumed as reliable as the one that has them
        ceiling_tt = float(math.sqrt(max(tt[0], 0.0) * max(tt[-1], 0.0)))
    rels = [ca.reliability, cb.reliability]
    ceiling_s = float(math.sqrt(rels[0] * rels[1])) if all(np.isfinite(rels)) else None
    return ceiling_tt, ceiling_s


def _pair_core(ca: _Curve, cb: _Curve, n_games: int, settings: CompareSettings, interaction: dict[str, Any],
               boot_label: str) -> dict[str, Any]:
    common, ia, ib = _shared(ca, cb)
    la, lb = ca.lifts[ia], cb.lifts[ib]
    out: dict[str, Any] = {"a": ca.run, "b": cb.run, "checkpoints": [int(s) for s in common], "n_checkpoints": len(common),
                           "n_games": n_games, "bootstrap": boot_label}
    ceiling_tt, ceiling_s = _ceilings(ca, cb)
    out["ceiling_test_retest"] = ceiling_tt
    out["ceiling_sampling"] = ceiling_s
    out["interaction"] = interaction
    if len(common) < 3:
        out.update({"pearson": None, "pearson_ci": [None, None], "spearman": None, "spearman_ci": [None, None]})
        out.update(verdict(None, (None, None), interaction.get("p_value"), settings, n_checkpoints=len(common)))
        out["n_to_decide"] = None
        return out
    ba, bb = ca.boot[:, ia], cb.boot[:, ib]
    pr = float(cs.row_pearson(la, lb))
    sr = float(cs.row_spearman(la, lb))
    pr_ci = cs.percentile_ci(cs.row_pearson(ba, bb), settings.level)
    sr_ci = cs.percentile_ci(cs.row_spearman(ba, bb), settings.level)
    out.update({"pearson": pr, "pearson_ci": list(pr_ci), "spearman": sr, "spearman_ci": list(sr_ci)})
    v = verdict(pr, pr_ci, interaction.get("p_value"), settings, n_checkpoints=len(common))
    out.update(v)
    if v["verdict"] == NO_EVIDENCE:
        n_corr, direction = cs.n_for_correlation_ci(la, ba, lb, bb, n_games, settings.level)
        n_int = None
        if interaction.get("statistic") is not None:
            n_int = cs.n_for_chi2_power(interaction["statistic"], int(interaction["df"]), n_games,
                                        settings.alpha, settings.power)
        cands = [(n, why) for n, why in ((n_corr, f"Pearson CI would exclude 0 ({direction})"),
                                          (n_int, f"interaction test at {settings.power:.0%} power")) if n is not None]
        if cands:
            n_dec, why = min(cands, key=lambda t: t[0])
            out["n_to_decide"] = n_dec
            out["criterion"] += (f" About {n_dec} games per arm would decide ({why}), if the observed curves were "
                                 "the truth.")
        else:
            out["n_to_decide"] = None
            out["criterion"] += (f" No sample size up to {int(cs.SCALE_FACTORS[-1])}x the games would decide: the "
                                 "observed curves are at noise level.")
    else:
        out["n_to_decide"] = None
    return out


def verdict(pearson: float | None, pearson_ci: tuple[Any, Any], interaction_p: float | None,
            settings: CompareSettings, *, n_checkpoints: int) -> dict[str, str]:
    """The shape verdict for one pair of runs, with its criterion written out.

    Criterion (alpha and CI level from `settings`):
      - "shapes agree"  if the bootstrap CI of Pearson r of per-checkpoint lifts lies entirely above 0
                         (the curves co-move beyond sampling noise);
      - "shapes differ" if that CI lies entirely below 0, or the run x checkpoint interaction has p < alpha
                         while the CI does not lie above 0;
      - otherwise "no evidence either way at this sample size".
    A significant interaction together with a CI above 0 is still "agree" (same ups and downs, different
    amplitude on the logit scale) and the criterion says so.
    """
    lvl = f"{settings.level:.0%}"
    rule = (f"agree if the {lvl} bootstrap CI of Pearson r of the per-checkpoint lifts lies above 0; differ if "
            f"it lies below 0, or if the run x checkpoint interaction has p < {settings.alpha} and the CI does not "
            f"lie above 0; otherwise no evidence.")
    if n_checkpoints < 3:
        return {"verdict": NO_EVIDENCE,
                "criterion": f"{rule} Only {n_checkpoints} shared checkpoint(s): a correlation needs at least 3."}
    lo, hi = pearson_ci
    p = interaction_p
    p_txt = f"{p:.3g}" if p is not None else "not computed"
    r_txt = (f"r = {pearson:.2f} [{lo:.2f}, {hi:.2f}]" if pearson is not None and lo is not None
             and np.isfinite(lo) and np.isfinite(hi) else "r undefined (a flat curve)")
    here = f" Here {r_txt}, interaction p = {p_txt}."
    above = lo is not None and np.isfinite(lo) and lo > 0
    below = hi is not None and np.isfinite(hi) and hi < 0
    inter = p is not None and p < settings.alpha
    if above:
        extra = " The interaction is significant: same ups and downs, different amplitude." if inter else ""
        return {"verdict": AGREE, "criterion": rule + here + extra}
    if below:
        return {"verdict": DIFFER, "criterion": rule + here + " The curves move in opposite directions."}
    if inter:
        return {"verdict": DIFFER, "criterion": rule + here + " The checkpoint profiles differ beyond noise."}
    return {"verdict": NO_EVIDENCE, "criterion": rule + here}


def _pair_games(ra: str, rb: str, curves: dict[str, _Curve], arms: list[ArmInfo], ya: np.ndarray, n_games: int,
                settings: CompareSettings) -> dict[str, Any]:
    ca, cb = curves[ra], curves[rb]
    common, ia, ib = _shared(ca, cb)
    if len(common) >= 2:
        ja, jb = ca.arm_idx[ia], cb.arm_idx[ib]
        k = len(common)
        # long format: rows (game, run, checkpoint)
        outcomes = np.concatenate([ya[ja].ravel(), ya[jb].ravel()])
        game = np.tile(np.arange(n_games), 2 * k)
        group = np.repeat([0, 1], k * n_games)
        ckpt = np.tile(np.repeat(np.arange(k), n_games), 2)
        inter = cs.interaction_test(outcomes, game, group, ckpt)
    else:
        inter = {"method": "none", "statistic": None, "df": 0, "p_value": None, "n_games": 0,
                 "note": "fewer than 2 shared checkpoints"}
    return _pair_core(ca, cb, n_games, settings, inter, "games resampled jointly across all arms")


# ------------------------------------------------------------------------------------------------------------
# Published summaries


SUMMARY_SKIPPED_ALWAYS = [
    "paired bootstrap over games: needs per-game outcomes (replaced by a parametric binomial bootstrap that treats "
    "arms as independent; conservative for lifts, pairing is unknown)",
    "Cochran's Q across checkpoints: needs per-game outcomes",
    "interaction test with game effects: needs per-game outcomes (replaced by a binomial GLM on counts, "
    "run x checkpoint vs run + checkpoint, without game effects)",
    "test-retest ceiling: summaries carry no replicate arms",
    "unmeasured counts and the unmeasured flag: summaries give measured n only",
]


def compare_summaries(table: SummaryTable, baseline: str, settings: CompareSettings) -> dict[str, Any]:
    """The statistics that per-checkpoint counts support (see SUMMARY_SKIPPED_ALWAYS for the rest)."""
    from scipy import stats

    base_i = _split_baseline(table.arms, baseline)
    base = table.arms[base_i]
    arms = [a for i, a in enumerate(table.arms) if i != base_i]
    assert base.n is not None and base.successes is not None
    p0 = base.successes / base.n
    n = np.array([a.n for a in arms], dtype=np.float64)
    s = np.array([a.successes for a in arms], dtype=np.float64)
    pa = s / n
    has_bc = np.array([a.b is not None for a in arms])
    lift = np.where(has_bc, [((a.b or 0) - (a.c or 0)) / (a.n or 1) for a in arms], pa - p0)
    z = stats.norm.ppf(1 - (1 - settings.level) / 2)
    pvals = np.empty(len(arms))
    lo = np.empty(len(arms))
    hi = np.empty(len(arms))
    mde = np.empty(len(arms))
    tests: list[str] = []
    ci_methods: list[str] = []
    for j, a in enumerate(arms):
        if a.b is not None and a.c is not None:
            pvals[j] = cs.mcnemar_exact(a.b, a.c)
            tests.append("exact McNemar (binomial on b, c)")
            var = max(((a.b + a.c) / n[j] - lift[j] ** 2) / n[j], 0.0)
            ci_methods.append("paired Wald from b, c")
            mde[j] = float(cs.mde_paired(np.array([n[j]]), np.array([(a.b + a.c) / n[j]]), settings.alpha, settings.power)[0])
        else:
            pvals[j] = float(stats.fisher_exact([[a.successes, a.n - a.successes],
                                                 [base.successes, base.n - base.successes]])[1])
            tests.append("Fisher exact (unpaired: no b, c given; conservative)")
            var = pa[j] * (1 - pa[j]) / n[j] + p0 * (1 - p0) / base.n
            ci_methods.append("unpaired Wald")
            mde[j] = float(cs.mde_unpaired(np.array([n[j]]), np.array([base.n]), np.array([p0]), settings.alpha,
                                           settings.power)[0])
        lo[j], hi[j] = lift[j] - z * math.sqrt(var), lift[j] + z * math.sqrt(var)
    fams = [_family(a, settings) for a in arms]
    adj = cs.adjust_pvalues(pvals, fams)

    # parametric bootstrap: successes ~ Binomial(n, p_hat) per arm, independently (pairing unknown)
    rng = np.random.default_rng(settings.seed)
    boot_a = rng.binomial(n.astype(np.int64)[None, :], pa[None, :], size=(settings.n_boot, len(arms))) / n[None, :]
    boot_0 = rng.binomial(base.n, p0, size=settings.n_boot) / base.n
    # centred on the reported lift (paired (b - c) / n where given) so resampled deviations are pure noise
    boot_lift = boot_a - boot_0[:, None] - (pa - p0)[None, :] + lift[None, :]
    runs, curves = _run_curves(arms, lift, boot_lift, settings, rng, ya=None, adj_holm=adj["holm"])
    for entry in runs.values():
        entry["cochran_q"] = None
    pairs = []
    for ra, rb in combinations(sorted(curves), 2):
        inter = _summary_interaction(arms, curves[ra], curves[rb])
        pairs.append(_pair_core(curves[ra], curves[rb], int(np.median(n)), settings, inter,
                                "parametric binomial, arms independent"))

    skipped = list(SUMMARY_SKIPPED_ALWAYS)
    no_bc = [a.name for a in arms if a.b is None]
    if no_bc:
        skipped.insert(0, f"exact McNemar for {len(no_bc)} arm(s) without b, c ({', '.join(no_bc[:5])}"
                          f"{', ...' if len(no_bc) > 5 else ''}): Fisher exact on the 2x2 counts instead")
    arm_rows = []
    for j, a in enumerate(arms):
        arm_rows.append({
            "arm": a.name, "run": a.run, "checkpoint": a.checkpoint, "replicate": 0, "role": a.role,
            "family": fams[j], "n_games": a.n, "n_measured": a.n, "n_unmeasured": None, "n_missing": None,
            "unmeasured_share": None, "flagged": False, "n_pairs": a.n if a.b is not None else None,
            "success_rate": pa[j], "baseline_rate_paired": None, "lift": lift[j], "lift_ci": [lo[j], hi[j]],
            "ci_method": ci_methods[j], "b": a.b, "c": a.c, "test": tests[j], "p_value": pvals[j],
            "p_holm": adj["holm"][j], "p_bh": adj["bh"][j], "p_bonferroni": adj["bonferroni"][j], "mde": mde[j],
        })
    result = {
        "schema_version": COMPARE_SCHEMA_VERSION, "kind": "comparison", "source": "summary",
        "summary_file": table.source, "sweep_id": None, "games_hash": None, "n_games": base.n,
        "settings": _settings_dict(settings),
        "baseline": {"arm": baseline, "n_measured": base.n, "n_unmeasured": None, "n_missing": None,
                     "success_rate": p0, "ci": [p0 - z * math.sqrt(p0 * (1 - p0) / base.n),
                                                p0 + z * math.sqrt(p0 * (1 - p0) / base.n)]},
        "arms": arm_rows, "runs": runs, "pairs": pairs, "flags": [], "skipped": skipped,
    }
    return _clean(result)


def _summary_interaction(arms: list[ArmInfo], ca: _Curve, cb: _Curve) -> dict[str, Any]:
    """Binomial GLM on counts: successes ~ run x checkpoint vs run + checkpoint (LR, df K - 1), no game effects."""
    import warnings

    import statsmodels.api as sm
    from scipy import stats

    common, ia, ib = _shared(ca, cb)
    k = len(common)
    if k < 2:
        return {"method": "none", "statistic": None, "df": 0, "p_value": None, "n_games": None,
                "note": "fewer than 2 shared checkpoints"}
    js = list(ca.arm_idx[ia]) + list(cb.arm_idx[ib])
    succ = np.array([arms[j].successes for j in js], dtype=float)
    tot = np.array([arms[j].n for j in js], dtype=float)
    grp = np.repeat([0.0, 1.0], k)
    ck = np.zeros((2 * k, k - 1))
    for r in range(2 * k):
        c = r % k
        if c > 0:
            ck[r, c - 1] = 1.0
    red = np.column_stack([np.ones(2 * k), grp, ck])
    full = np.column_stack([red, ck * grp[:, None]])
    endog = np.column_stack([succ, tot - succ])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            llf_full = sm.GLM(endog, full, family=sm.families.Binomial()).fit().llf
            llf_red = sm.GLM(endog, red, family=sm.families.Binomial()).fit().llf
        except (ValueError, np.linalg.LinAlgError) as e:
            return {"method": "binomial GLM on counts", "statistic": None, "df": k - 1, "p_value": None,
                    "n_games": None, "note": f"fit failed ({type(e).__name__})"}
    lr = max(0.0, 2.0 * (llf_full - llf_red))
    return {"method": "binomial GLM on counts (no game effects; conservative for paired data), likelihood ratio",
            "statistic": lr, "df": k - 1, "p_value": float(stats.chi2.sf(lr, k - 1)), "n_games": None, "note": ""}


# ------------------------------------------------------------------------------------------------------------
# Output helpers


def _settings_dict(s: CompareSettings) -> dict[str, Any]:
    return {"alpha": s.alpha, "power": s.power, "level": s.level, "n_boot": s.n_boot, "seed": s.seed,
            "max_unmeasured_share": s.max_unmeasured_share, "family": s.family}


def _clean(obj: Any) -> Any:
    """JSON-able copy: numpy scalars to Python, NaN/inf to None, tuples to lists."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [_clean(v) for v in obj.tolist()]
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        return f if math.isfinite(f) else None
    return obj


def to_json(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=2, sort_keys=False, allow_nan=False)


# ------------------------------------------------------------------------------------------------------------
# Synthetic sweeps (tests, benches, docs): a known truth to check the statistics against


def synthetic_game_table(shapes: dict[str, Sequence[float]], *, n_games: int = 140, steps: Sequence[int] | None = None,
                         base_logit: float = 0.0, game_sd: float = 1.5, seed: int = 0,
                         unmeasured_share: float = 0.0, replicates: Sequence[str] = (),
                         baseline: str = "baseline") -> GameTable:
    """A sweep with known truth. Outcome of game g in an arm of run r at checkpoint k is
    Bernoulli(sigmoid(base_logit + d_g + shapes[r][k])), with game difficulty d_g ~ N(0, game_sd) shared by all
    arms (that is what makes pairing matter). The baseline arm has shape 0. `replicates` names runs whose every
    checkpoint is played again (replicate 1); "baseline" there adds a baseline replicate. A share of rows is made
    unmeasured at random.
    """
    rng = np.random.default_rng(seed)
    d = rng.normal(0.0, game_sd, n_games)
    k = len(next(iter(shapes.values()))) if shapes else 0
    steps = list(steps) if steps is not None else [10 * (i + 1) for i in range(k)]
    arms: list[ArmInfo] = []
    rows: list[np.ndarray] = []

    def play(shift: float) -> np.ndarray:
        p = 1.0 / (1.0 + np.exp(-(base_logit + d + shift)))
        y = (rng.random(n_games) < p).astype(np.float64)
        y[rng.random(n_games) < unmeasured_share] = np.nan
        return y

    def add(info: ArmInfo, shift: float) -> None:
        y = play(shift)
        info.n_unmeasured = int(np.isnan(y).sum())
        arms.append(info)
        rows.append(y)

    add(ArmInfo(baseline, None, None, 0, "baseline"), 0.0)
    if baseline in replicates:
        add(ArmInfo(f"{baseline}#r1", None, None, 1, "baseline"), 0.0)
    for run, shape in shapes.items():
        if len(shape) != len(steps):
            raise CompareError(f"shapes[{run!r}]: {len(shape)} values for {len(steps)} steps (fix: one per step)")
        for step, s in zip(steps, shape):
            add(ArmInfo(f"{run}@{step}", run, int(step), 0), float(s))
            if run in replicates:
                add(ArmInfo(f"{run}@{step}#r1", run, int(step), 1), float(s))
    ids = [f"game-{i:04d}" for i in range(n_games)]
    return GameTable(arms, np.vstack(rows), ids, sweep_id=f"synthetic-{seed}", games_hash=f"synthetic-{n_games}")
