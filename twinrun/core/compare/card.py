"""`twinrun card`: a Hub-ready model folder from a sweep and its comparison.

The folder holds ``README.md`` (YAML front matter + the card), ``card.json`` (the same numbers, unrounded) and
one subfolder per selected checkpoint (``<run>-step-NNNNNN/``, the HF weights and tokenizer, hard-linked when
the file system allows). Every number in the card's table is read from the comparison (`compare`'s JSON) by
:func:`arm_numbers`; nothing is recomputed here. By default each run's peak and final checkpoints are selected.

A checkpoint is copied only if its content is the one the sweep evaluated (the sweep manifest's checkpoint
hash), so a card can never describe weights that were replaced after their evaluation.

The front matter is ``huggingface_hub.ModelCardData``'s, with one ``eval_results`` entry per number the table
states (each checkpoint's success rate and lift, the baseline's success rate): the ``model-index`` the Hub renders
as the card's evaluation results.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from twinrun.core.errors import DependencyMissing, TwinrunError
from twinrun.core.records import atomic_write_json, atomic_write_text, publishing_dir

CARD_SCHEMA_VERSION = 1
# the executor settings that decide what each kind of executor does (core.executors.make_executor reads them);
# a field that means nothing for the kind (temperature of the scripted stand-in) is not stated on the card
EXECUTOR_CARD_FIELDS = {
    "scripted": ("expert_prob", "skill_effect", "max_turns", "history"),
    "openai": ("model", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "repetition_penalty",
               "max_tokens", "max_turns", "history"),
    "hf": ("model", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_tokens", "max_turns",
           "history"),
}
ADJUSTMENTS = {"holm": "Holm", "bh": "Benjamini-Hochberg", "bonferroni": "Bonferroni"}


class CardError(TwinrunError, ValueError):
    """A card that cannot be built as asked (one line: what, which value, fix)."""


# ------------------------------------------------------------------------------------------------------------
# Reading compare's JSON (the one place that knows its field names)


def arm_numbers(result: Mapping[str, Any], arm: str, adjust: str) -> dict[str, Any]:
    """The numbers of one checkpoint arm in a `compare` result: success rate, lift over the same-sweep
    baseline with its CI, the raw p-value, the p-value adjusted (`adjust`) within the arm's family, and the
    family. Raises CardError when the arm is not in the comparison."""
    for a in result.get("arms") or []:
        if a.get("arm") == arm:
            ci = a.get("lift_ci") or [None, None]
            return {"success_rate": a.get("success_rate"), "lift": a.get("lift"), "ci_low": ci[0], "ci_high": ci[1],
                    "p": a.get("p_value"), "p_adjusted": a.get(f"p_{adjust}"), "family": a.get("family"),
                    "n_measured": a.get("n_measured"), "n_unmeasured": a.get("n_unmeasured")}
    raise CardError(f"--select: {arm!r} is not an arm of the comparison (fix: one of "
                    f"{[a.get('arm') for a in result.get('arms') or []]})")


def comparison_facts(result: Mapping[str, Any]) -> dict[str, Any]:
    """What the card states about the comparison as a whole (settings, baseline, run curves, verdicts)."""
    s = result.get("settings") or {}
    base = result.get("baseline") or {}
    runs = {name: {"peak": c.get("peak_checkpoint"), "checkpoints": c.get("checkpoints") or []}
            for name, c in (result.get("runs") or {}).items()}
    return {"alpha": s.get("alpha"), "level": s.get("level"), "family": s.get("family"), "n_boot": s.get("n_boot"),
            "seed": s.get("seed"), "baseline_arm": base.get("arm"), "baseline_rate": base.get("success_rate"),
            "baseline_ci": base.get("ci"), "baseline_measured": base.get("n_measured"), "sweep_id": result.get("sweep_id"),
            "games_hash": result.get("games_hash"), "n_games": result.get("n_games"), "runs": runs,
            "family_map": s.get("family_map") or [],
            "family_sizes": sorted({int(f["size"]) for f in (result.get("families") or {}).values() if f.get("size")}),
            "verdicts": [{"a": p.get("a"), "b": p.get("b"), "verdict": p.get("verdict"),
                          "explanation": p.get("explanation"), "criterion": p.get("criterion")}
                         for p in result.get("pairs") or []],
            "frameworks": [{"a": c.get("a"), "b": c.get("b"), "verdict": c.get("verdict"),
                            "explanation": c.get("explanation")}
                           for c in (result.get("frameworks") or {}).get("comparisons") or [] if c.get("verdict")],
            "frameworks_note": (result.get("frameworks") or {}).get("note") or "",
            "checkpoint_arms": [a.get("arm") for a in result.get("arms") or []
                                if a.get("role", "checkpoint") == "checkpoint" and not a.get("replicate")]}


FAMILY_WORDS = {"run": "one family per run",
                "all": "every checkpoint arm in one family",
                "custom": "custom families"}


def family_words(facts: Mapping[str, Any]) -> str:
    """The multiplicity family rule in words, with the family sizes compare reported (the size sets the bar)."""
    rule = str(facts["family"])
    words = FAMILY_WORDS.get(rule, f"family rule {rule!r}")
    if rule == "custom" and facts.get("family_map"):
        words += " (" + ", ".join(f"{n}={g}" for n, g in facts["family_map"]) + ")"
    sizes = facts.get("family_sizes") or []
    if sizes:
        words += f" of {' / '.join(map(str, sizes))} arm{'s' if sizes != [1] else ''}"
    return words


# ------------------------------------------------------------------------------------------------------------
# Selection


@dataclass
class CardRow:
    arm: str
    run: str
    step: int
    why: str  # peak | final | peak, final | selected
    subfolder: str
    checkpoint_hash: str | None
    source: str
    numbers: dict[str, Any] = field(default_factory=dict)


def select_rows(result: Mapping[str, Any], plan: Any, select: Sequence[str], adjust: str) -> list[CardRow]:
    """Each run's peak and final checkpoint (default), or the arms named in `select` (``RUN@STEP``)."""
    facts = comparison_facts(result)
    wanted: dict[str, list[str]] = {}
    if select:
        for arm in select:
            wanted.setdefault(arm, []).append("selected")
    else:
        for run, c in sorted(facts["runs"].items()):
            if not c["checkpoints"]:
                continue
            wanted.setdefault(f"{run}@{c['peak']}", []).append("peak")
            wanted.setdefault(f"{run}@{max(c['checkpoints'])}", []).append("final")
    if not wanted:
        raise CardError("card: the comparison has no run with measured checkpoints (fix: sweep and compare first)")
    rows = []
    for arm, why in wanted.items():
        numbers = arm_numbers(result, arm, adjust)
        try:
            ap = plan.arm(arm)
        except TwinrunError:
            raise CardError(f"--select: {arm!r} is not an arm of sweep {plan.sweep_id} (fix: the comparison and "
                            "the sweep folder must be the same sweep)") from None
        if ap.role != "checkpoint" or ap.checkpoint_path is None:
            raise CardError(f"--select: {arm!r} is not a checkpoint arm (fix: RUN@STEP of a run)")
        rows.append(CardRow(arm=arm, run=str(ap.run), step=int(ap.checkpoint_step), why=", ".join(why),
                            subfolder=f"{ap.run}-step-{int(ap.checkpoint_step):06d}", checkpoint_hash=ap.checkpoint_hash,
                            source=str(ap.checkpoint_path), numbers=numbers))
    return sorted(rows, key=lambda r: (r.run, r.step))


# ------------------------------------------------------------------------------------------------------------
# Formatting (the test parses these back)


def fmt_pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


def fmt_pp(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:+.1f}"


def fmt_p(v: float | None) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return "<0.0001" if v < 1e-4 else f"{v:.4f}"


TABLE_COLUMNS = ["checkpoint", "run", "step", "selected as", "success %", "lift pp", "CI pp", "p", "adjusted p",
                 "family", "subfolder"]


def table_rows(rows: Sequence[CardRow]) -> list[list[str]]:
    out = []
    for r in rows:
        n = r.numbers
        out.append([f"`{r.arm}`", r.run, str(r.step), r.why, fmt_pct(n["success_rate"]), fmt_pp(n["lift"]),
                    f"[{fmt_pp(n['ci_low'])}, {fmt_pp(n['ci_high'])}]", fmt_p(n["p"]), fmt_p(n["p_adjusted"]),
                    str(n["family"]), f"`{r.subfolder}`"])
    return out


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def survivors(result: Mapping[str, Any], adjust: str) -> tuple[list[str], int, float]:
    """(arms whose adjusted p is below alpha, number of checkpoint arms tested, alpha)."""
    facts = comparison_facts(result)
    alpha = float(facts["alpha"])
    arms = facts["checkpoint_arms"]
    surviving = []
    for arm in arms:
        p = arm_numbers(result, arm, adjust)["p_adjusted"]
        if p is not None and p < alpha:
            surviving.append(arm)
    return surviving, len(arms), alpha


def correction_statement(result: Mapping[str, Any], adjust: str) -> str:
    facts = comparison_facts(result)
    surviving, n, alpha = survivors(result, adjust)
    family = family_words(facts)
    how = f"{ADJUSTMENTS[adjust]} correction at alpha {alpha:g}, {family}"
    if not surviving:
        return (f"**Nothing survives correction.** None of the {n} checkpoint arms' lift over the same-sweep "
                f"baseline has an adjusted p-value below {alpha:g} ({how}). The lifts in the table are not evidence "
                "that any checkpoint beats the baseline.")
    return (f"{len(surviving)} of {n} checkpoint arms survive {how}: "
            + ", ".join(f"`{a}`" for a in surviving) + ".")


# ------------------------------------------------------------------------------------------------------------
# The card


@dataclass
class CardContext:
    """Everything the card says besides the comparison's numbers (read from the sweep and its runs)."""

    spec_name: str
    spec_hash: str
    base_model: str | None
    environment: str
    task_types: list[str]
    split: str
    game_ids: list[str]
    games_hash: str
    executor: dict[str, Any]
    executor_settings_hash: str | None
    estimator: str
    runs: dict[str, dict[str, Any]]  # run -> backend, framework version, spec hash, run dir
    twinrun_version: str
    license: str
    datasets: list[str]
    repo_id: str | None


def card_context(sweep_dir: Path, plan: Any, *, license: str, datasets: Sequence[str] | None,
                 repo_id: str | None) -> CardContext:
    from twinrun.core.records import read_jsonl, twinrun_version

    runs: dict[str, dict[str, Any]] = {}
    spec_data: dict[str, Any] | None = None
    for a in plan.arms:
        if a.role != "checkpoint" or a.run in runs:
            continue
        info: dict[str, Any] = {"backend": a.backend, "spec_hash": a.run_spec_hash, "run_dir": a.run_dir,
                                "framework_version": None}
        run_dir = Path(a.run_dir) if a.run_dir else None
        if run_dir is not None:
            for row in read_jsonl(run_dir / "metrics.jsonl"):
                info["framework_version"] = (row.get("provenance") or {}).get("framework_version")
                break
            if spec_data is None and (run_dir / "spec.yaml").is_file():
                spec_data = yaml.safe_load((run_dir / "spec.yaml").read_text(encoding="utf-8"))
        runs[str(a.run)] = info
    spec_data = spec_data or {}
    env = spec_data.get("environment") or {}
    ex = spec_data.get("executor") or {}
    model = (spec_data.get("curator") or {}).get("model")
    return CardContext(
        spec_name=plan.spec_name, spec_hash=plan.spec_hash,
        base_model=model if isinstance(model, str) and "/" in model and not Path(model).exists() else None,
        environment=env.get("name", "unknown"), task_types=list(env.get("task_types") or []), split=plan.split,
        game_ids=plan.game_ids, games_hash=plan.games_hash,
        executor=executor_settings(ex),
        executor_settings_hash=plan.executor_settings_hash,
        estimator=str((spec_data.get("algorithm") or {}).get("estimator", "")),
        runs=runs, twinrun_version=twinrun_version(), license=license,
        datasets=list(datasets) if datasets else [env.get("name", "unknown")], repo_id=repo_id)


def executor_settings(ex: Mapping[str, Any]) -> dict[str, Any]:
    """The executor's kind and the spec fields that apply to that kind (None = left to the server: not shown)."""
    kind = ex.get("kind")
    fields = EXECUTOR_CARD_FIELDS.get(str(kind), ("model", "max_turns"))
    return {"kind": kind, **{k: ex[k] for k in fields if ex.get(k) is not None}} if kind else {}


def eval_results(ctx: CardContext, facts: Mapping[str, Any], rows: Sequence[CardRow]) -> list[Any]:
    """One ``huggingface_hub.EvalResult`` per measured number of the table: each checkpoint's success rate (%)
    and lift over the same-sweep baseline (percentage points), and the baseline's success rate. The dataset is the
    sweep's game list (its hash is the revision); the checkpoint is named in the metric and its subfolder in
    ``metric_config``."""
    from huggingface_hub import EvalResult

    dataset = {"dataset_type": ctx.environment, "dataset_name": f"{ctx.environment} {ctx.split} "
               f"({len(ctx.game_ids)} held-out games)", "dataset_split": ctx.split, "dataset_revision": ctx.games_hash}
    task = {"task_type": "reinforcement-learning", "task_name": "skill curation (streaming, frozen executor)"}
    out = []

    def add(metric_type: str, name: str, value: float | None, config: str | None = None) -> None:
        if value is not None and math.isfinite(value):
            out.append(EvalResult(**task, **dataset, metric_type=metric_type, metric_name=name,
                                  metric_value=round(100 * value, 2), metric_config=config))

    for r in rows:
        add("success_rate", f"{r.arm} success rate (%)", r.numbers.get("success_rate"), r.subfolder)
        add("lift", f"{r.arm} lift over the baseline (pp)", r.numbers.get("lift"), r.subfolder)
    add("success_rate", "baseline (no memory) success rate (%)", facts["baseline_rate"], facts["baseline_arm"])
    return out


def front_matter(ctx: CardContext, facts: Mapping[str, Any] | None = None, rows: Sequence[CardRow] = ()
                 ) -> dict[str, Any]:
    """The card's YAML as ``huggingface_hub.ModelCardData`` writes it: license, library, tags, datasets, base model
    and (with the comparison's facts and the selected rows) the ``model-index`` of :func:`eval_results`."""
    try:
        from huggingface_hub import ModelCardData
    except ImportError:
        raise DependencyMissing("card: huggingface_hub is missing (fix: pip install 'twinrun[tracking]')") from None
    results = eval_results(ctx, facts, rows) if facts is not None else []
    data = ModelCardData(
        license=ctx.license, library_name="transformers", pipeline_tag="text-generation",
        tags=sorted({"twinrun", "skillos", "skill-curator", "reinforcement-learning", ctx.environment,
                     *(ctx.estimator and [ctx.estimator] or []),
                     *(r["backend"] for r in ctx.runs.values() if r.get("backend"))}),
        datasets=ctx.datasets, base_model=ctx.base_model or None,
        model_name=f"{ctx.spec_name}-curator" if results else None, eval_results=results or None,
    )
    return data.to_dict()


def render_readme(ctx: CardContext, result: Mapping[str, Any], rows: Sequence[CardRow], adjust: str) -> str:
    facts = comparison_facts(result)
    repo = ctx.repo_id or "PATH/OR/REPO_ID"
    level = facts["level"] or 0.95
    lines = ["---", yaml.safe_dump(front_matter(ctx, facts, rows), sort_keys=False).rstrip(), "---", "",
             f"# {ctx.spec_name}: skill-curator checkpoints", "",
             f"Curator checkpoints of the `{ctx.spec_name}` arm trained with twinrun under "
             f"{', '.join(sorted({r['backend'] for r in ctx.runs.values() if r.get('backend')}))}, evaluated on "
             f"{facts['n_games']} held-out {ctx.environment} games against a no-memory baseline measured in the same "
             "sweep.", "",
             "## Selected checkpoints", "",
             _md_table(TABLE_COLUMNS, table_rows(rows)), "",
             f"Lift: checkpoint success rate minus the same-sweep baseline's, in percentage points, over the games "
             f"measured in both; CI: {100 * level:g}% paired bootstrap over games ({facts['n_boot']} resamples, seed "
             f"{facts['seed']}); p: exact McNemar test; adjusted p: {ADJUSTMENTS[adjust]} within the family "
             f"({family_words(facts)}).", "",
             correction_statement(result, adjust), "",
             f"Baseline `{facts['baseline_arm']}` (no memory, same sweep): success {fmt_pct(facts['baseline_rate'])}% "
             f"[{fmt_pct((facts['baseline_ci'] or [None, None])[0])}, {fmt_pct((facts['baseline_ci'] or [None, None])[1])}]"
             f" over {facts['baseline_measured']} measured games.", ""]
    if facts["verdicts"]:
        lines += ["## Do the frameworks agree?", ""]
        lines += [f"- **{v['a']} vs {v['b']}: {v['verdict']}.** {v.get('explanation') or ''}".rstrip()
                  for v in facts["verdicts"]]
        lines += [f"- **framework {v['a']} vs {v['b']}: {v['verdict']}.** {v.get('explanation') or ''}".rstrip()
                  for v in facts["frameworks"]]
        if facts["frameworks_note"]:
            lines.append(f"- Note: {facts['frameworks_note']}.")
        lines += ["", f"Criterion (stated before looking): {facts['verdicts'][0]['criterion']}"]
        lines.append("")
    ex = ", ".join(f"{k} {v}" for k, v in ctx.executor.items())
    lines += ["## Evaluation", "",
              f"- Executor (frozen): {ex} (settings hash `{ctx.executor_settings_hash}`).",
              f"- Games: {len(ctx.game_ids)} from `{ctx.environment}` split `{ctx.split}`"
              + (f", task types {', '.join(ctx.task_types)}" if ctx.task_types else "")
              + f"; game-list hash `{ctx.games_hash}`; sweep `{facts['sweep_id']}`.",
              "- Streaming curation: each checkpoint starts from an empty skill repo and curates after every game; "
              "the baseline plays the same games with no memory.", "",
              "<details><summary>Game list</summary>", "", *[f"- `{g}`" for g in ctx.game_ids], "", "</details>", "",
              "## How to load a checkpoint", "",
              "Each checkpoint is a subfolder holding the HF weights and tokenizer:", "", "```python",
              "from transformers import AutoModelForCausalLM, AutoTokenizer", ""]
    for r in rows[:1]:
        lines += [f'model = AutoModelForCausalLM.from_pretrained("{repo}", subfolder="{r.subfolder}")',
                  f'tokenizer = AutoTokenizer.from_pretrained("{repo}", subfolder="{r.subfolder}")']
    lines += ["```", "", "Other subfolders: " + ", ".join(f"`{r.subfolder}`" for r in rows[1:]) + "." if rows[1:] else "",
              "", "## Provenance", "",
              _md_table(["checkpoint", "subfolder", "checkpoint hash"],
                        [[f"`{r.arm}`", f"`{r.subfolder}`", f"`{r.checkpoint_hash}`"] for r in rows]), "",
              _md_table(["run", "backend", "framework", "spec hash"],
                        [[run, str(i.get("backend")), str(i.get("framework_version")), f"`{i.get('spec_hash')}`"]
                         for run, i in sorted(ctx.runs.items())]), "",
              f"Sweep spec hash `{ctx.spec_hash}`; twinrun {ctx.twinrun_version}. `card.json` holds every number "
              "above unrounded.", ""]
    return "\n".join(lines)


def build_card(sweep_dir: str | Path, result: Mapping[str, Any], out_dir: str | Path, *,
               select: Sequence[str] = (), adjust: str = "holm", license: str = "apache-2.0",
               datasets: Sequence[str] | None = None, repo_id: str | None = None, log: Any = print) -> Path:
    """Write the card folder (atomically: the old folder or the complete new one). Returns its path."""
    from twinrun.core.sweeps.sweep import checkpoint_fingerprint, checkpoint_hash, load_plan

    if adjust not in ADJUSTMENTS:
        raise CardError(f"--adjust: {adjust!r} is not an adjustment (fix: one of {sorted(ADJUSTMENTS)})")
    sweep_dir = Path(sweep_dir)
    plan = load_plan(sweep_dir)
    if plan is None:
        raise CardError(f"SWEEP: {str(sweep_dir)!r} holds no sweep.json (fix: the --out folder of twinrun sweep)")
    if result.get("sweep_id") != plan.sweep_id:
        raise CardError(f"--compare: the comparison is of sweep {result.get('sweep_id')!r}, not {plan.sweep_id!r} "
                        "(fix: compare this sweep folder)")
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()) and not (out / "card.json").is_file():
        raise CardError(f"--out: {str(out)!r} is not empty and holds no card (fix: a new folder)")
    rows = select_rows(result, plan, select, adjust)
    ctx = card_context(sweep_dir, plan, license=license, datasets=datasets, repo_id=repo_id)
    with publishing_dir(out) as tmp:
        for r in rows:
            src = Path(r.source)
            if not (src / "config.json").is_file():
                raise CardError(f"checkpoint {r.arm}: {src} holds no HF checkpoint (fix: the run folder moved or was "
                                "pruned; sweep it again)")
            ap = plan.arm(r.arm)
            if checkpoint_fingerprint(src) != ap.checkpoint_stat and checkpoint_hash(src) != r.checkpoint_hash:
                raise CardError(f"checkpoint {r.arm}: {src} is not the checkpoint the sweep evaluated (hash "
                                f"{r.checkpoint_hash}) (fix: sweep it again)")
            log(f"card: {r.arm} -> {r.subfolder}")
            _link_tree(src, tmp / r.subfolder)
        atomic_write_text(tmp / "README.md", render_readme(ctx, result, rows, adjust))
        atomic_write_json(tmp / "card.json", {
            "schema_version": CARD_SCHEMA_VERSION, "adjust": adjust, "rows": [asdict(r) for r in rows],
            "statement": correction_statement(result, adjust), "context": asdict(ctx),
            "comparison": comparison_facts(result)})
    return out


def _link_tree(src: Path, dst: Path) -> None:
    for f in sorted(src.rglob("*")):
        target = dst / f.relative_to(src)
        if f.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(f, target)
        except OSError:
            shutil.copy2(f, target)


def push_card(folder: str | Path, repo_id: str, *, private: bool = False, log: Any = print) -> str | None:
    """Upload the card folder to the Hub (huggingface_hub). Returns the repo URL, or None after one line that
    says why not (no token, offline, no network, huggingface_hub missing); the folder stays either way."""
    try:
        from huggingface_hub import HfApi, get_token
    except ImportError:
        log(f"card: not pushed: huggingface_hub is not installed (fix: pip install 'twinrun[tracking]'); "
            f"the card stays in {folder}")
        return None
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        log(f"card: not pushed: HF_HUB_OFFLINE is set (fix: unset it where the Hub is reachable); the card stays "
            f"in {folder}")
        return None
    token = get_token()
    if not token:
        log(f"card: not pushed: no Hugging Face token (fix: `hf auth login` or HF_TOKEN); the card stays in {folder}")
        return None
    try:
        api = HfApi(token=token)
        url = api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        api.upload_folder(repo_id=repo_id, folder_path=str(folder), repo_type="model",
                          commit_message="twinrun card")
    except Exception as e:  # noqa: BLE001 - network, permissions, unknown repo: one line, the folder stays
        first = (str(e).strip().splitlines() or [""])[0][:200]
        log(f"card: not pushed to {repo_id} ({type(e).__name__}: {first}); the card stays in {folder}")
        return None
    log(f"card: pushed {folder} to {url}")
    return str(url)


def load_comparison(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CardError(f"--compare: {str(p)!r} cannot be read as JSON ({e}; fix: the compare.json written by "
                        "`twinrun compare --out`, or `compare --json` output)") from None
    if isinstance(data, dict) and data.get("kind") == "transfer":
        raise CardError(f"--compare: {str(p)!r} is a comparison across executors (fix: compare the card's one sweep, "
                        "without --across)")
    if not isinstance(data, dict) or data.get("kind") != "comparison":
        raise CardError(f"--compare: {str(p)!r} is not a twinrun comparison (fix: compare --out's compare.json)")
    return data
