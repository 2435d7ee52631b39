"""`twinrun eval-agent`: the ScienceWorld agent-evaluation protocol (see twinrun/core/sft/agent_eval/).

    twinrun eval-agent --checkpoint runs/sft-trl/checkpoints/step-000002 \\
                       --checkpoint runs/sft-verl/checkpoints/step-000002 --out runs/eval [--passes 4 ...]
    twinrun eval-agent --checkpoint CK --skills skills/human --out runs/eval-skills   # with/without-skill
    twinrun eval-agent --checkpoint Qwen/Qwen3-1.7B --run runs/sft-trl --run runs/rose-trl --out runs/table

The test variations are the pinned list of 200 shipped with twinrun (checked against the installed simulator;
not the published study's list, see DIVERGENCES E6); ``--variations N`` plays a seeded draw of N of them,
``--no-pinned`` draws from the whole split instead. ``--run DIR`` (an SFT or ROSE run folder, repeatable) adds
one arm per epoch / round checkpoint, labelled for the study's table (method, epoch/round, success, Avg@1,
literal template-copy share), and flags arms within re-evaluation noise of the best one.

Each checkpoint is one arm (``--label`` names it; default: its folder names). With ``--skills DIR`` (a curated
repo saved by twinrun, or a folder of human-written SKILL.md folders; repeatable) every checkpoint is played
without skills and once per skill folder with its retrieved skills, on the same games and seeds; the first
``--checkpoint`` is then the base model of the skill-free transfer comparison (each trained model without
skills against the base model with skills, paired). Results:
``OUT/summary.json`` (and the printed table), ``OUT/episodes.jsonl``, ``OUT/trajectories.jsonl`` and sweep-style
rows under ``OUT/compare/<group>/`` for ``twinrun compare OUT/compare/<group> --baseline <arm>``.
"""

from __future__ import annotations

import re
from pathlib import Path

import typer

from twinrun.commands._common import CacheOption, cache_dir
from twinrun.commands._options import FieldOptions
from twinrun.core.errors import TwinrunError
from twinrun.core.sft.agent_eval.protocol import AgentEvalSettings

# the protocol's options: default and help from AgentEvalSettings' fields; the flags the CLI had before its
# fields were named are kept (--task is given once per task)
EVAL = FieldOptions(AgentEvalSettings, flags={"tasks": "--task", "skill_top_k": "--top-k",
                                              "literal_copies": "--literal"},
                    omit={"top_p": "the protocol samples with top_p 1; ROSE's student sets it from the spec"})


def register(app: typer.Typer) -> None:
    app.command("eval-agent")(eval_agent)


def _label(path: str) -> str:
    p = Path(path)
    parts = [x for x in (p.parent.parent.name if p.parent.name == "checkpoints" else p.parent.name, p.name) if x]
    return re.sub(r"[^A-Za-z0-9._-]+", "-", "-".join(parts)).strip("-") or "model"


def eval_agent(
    checkpoint: list[str] = typer.Option([], "--checkpoint", help="HF model folder (or tiny-qwen3); repeatable"),
    run: list[Path] = typer.Option([], "--run", help="SFT or ROSE run folder: one arm per epoch/round; repeatable"),
    label: list[str] = typer.Option([], "--label", help="arm name per --checkpoint (default: folder names)"),
    base_url: str | None = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint instead of a folder"),
    model: str | None = typer.Option(None, "--model", help="model name at --base-url"),
    api_key_env: str = typer.Option("OPENAI_API_KEY", "--api-key-env", help="env var holding the endpoint key"),
    out: Path = typer.Option(..., "--out", help="results folder (resumes what is there)"),
    passes: int = EVAL("passes"),
    variations: int = EVAL("variations"),
    pinned: bool = EVAL("pinned"),
    literal: list[str] = EVAL("literal_copies", more="(repeatable)"),
    seed: int = EVAL("seed"),
    split: str = EVAL("split"),
    task: list[str] = EVAL("tasks", more="(repeatable)"),
    temperature: float = EVAL("temperature"),
    max_rounds: int = EVAL("max_rounds"),
    max_tokens: int = EVAL("max_tokens"),
    thinking: bool = EVAL("thinking"),
    skills: list[Path] = typer.Option([], "--skills", help="skill repo folder for the with-skill arm; repeatable"),
    top_k: int = EVAL("skill_top_k"),
    n_boot: int = EVAL("n_boot"),
    cache: Path | None = CacheOption,
    threads: int | None = typer.Option(None, "--threads", help="torch CPU threads for local generation "
                                       "(default: torch's; 1 avoids oversubscription on a shared CPU)"),
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON"),
) -> None:
    """Evaluate checkpoints on ScienceWorld: N passes, Avg@1 and success (mean ± std), paired bootstrap,
    template-copy share; optionally with and without retrieved skills."""
    import os

    from twinrun.commands._common import print_json
    from twinrun.core.sft.agent_eval import (
        hf_generator,
        openai_generator,
        run_agent_eval,
    )
    from twinrun.core.sft.agent_eval.runs import run_checkpoints
    from twinrun.core.envs.scienceworld import SciWorldEnv
    from twinrun.models.tiny import resolve_model

    if not checkpoint and not base_url and not run:
        raise TwinrunError("--checkpoint: none given (fix: --checkpoint DIR, repeatable, --run DIR, or --base-url "
                           "+ --model)")
    if base_url and not model:
        raise TwinrunError("--model: missing with --base-url (fix: the model name the endpoint serves)")
    if label and len(label) != len(checkpoint) + (1 if base_url else 0):
        raise TwinrunError(f"--label: {len(label)} labels for {len(checkpoint)} checkpoint(s) (fix: one per model)")
    try:
        settings = AgentEvalSettings(
            passes=passes, variations=variations, seed=seed, split=split, tasks=task or None, temperature=temperature,
            max_rounds=max_rounds, max_tokens=max_tokens, thinking=thinking, skill_top_k=top_k, n_boot=n_boot,
            pinned=pinned, literal_copies=literal,
        )
    except Exception as e:  # pydantic: one line naming the field
        err = getattr(e, "errors", lambda: [{"loc": ("?",), "msg": str(e), "input": None}])()[0]
        raise TwinrunError(f"{EVAL.flag_of(str(err['loc'][0]))}: {err.get('input')!r} {err['msg']}") from None

    from twinrun.app.environment import check_environment
    from twinrun.models.tiny import TINY_QWEN3

    check_environment("eval-agent", out=out, models=[c for c in checkpoint if c != TINY_QWEN3],
                      teacher=(base_url, model, api_key_env) if base_url else None)
    if threads is not None:
        import torch

        torch.set_num_threads(max(1, threads))
    models: list[tuple[str, str, object, str | None, str | None]] = []  # (label, checkpoint, generate, method, stage)
    cache_path = cache_dir(cache)
    for i, ck in enumerate(checkpoint):
        path = resolve_model(ck, cache_path)
        if not Path(path).is_dir():
            raise TwinrunError(f"--checkpoint: {ck!r} is not a model folder (fix: an HF checkpoint directory)")
        name = label[i] if label else _label(ck)
        models.append((name, path, hf_generator(path, settings), name if run else None, "base" if run else None))
    if base_url:
        key = os.environ.get(api_key_env, "EMPTY")
        name = label[-1] if label else _label(model or "endpoint")
        models.append((name, f"{base_url}#{model}", openai_generator(base_url, model or "", settings, api_key=key),
                       name if run else None, "endpoint" if run else None))
    for folder in run:
        for ck in run_checkpoints(folder):
            name = _label(str(folder)) + "-" + ck.stage.replace(" ", "")
            models.append((name, str(ck.path), hf_generator(str(ck.path), settings), ck.method, ck.stage))
    if len({m[0] for m in models}) != len(models):
        raise TwinrunError(f"--label: arm names {[m[0] for m in models]} collide (fix: pass --label per checkpoint)")

    repos = []
    for d in skills:
        repos.append((d.name or "skills", str(d.resolve()), _load_skills(d, top_k)))

    arms = _arms(models, repos)
    games, what = _games(settings)
    typer.echo(f"variations: {what}", err=True)
    env = SciWorldEnv(gold_path=False)
    prov = {"seed": settings.seed, "executor_settings_hash": settings.settings_hash()}
    try:
        summary = run_agent_eval(env, games, arms, settings, out, provenance_kw=prov,
                                 progress=lambda m: typer.echo(m, err=True))
    finally:
        env.shutdown()
    summary["variations"] = what
    if as_json:
        print_json(summary)
    else:
        typer.echo(f"variations: {what}")
        typer.echo(summary["table"])
        for g in summary["compare_groups"]:
            base = next(a.name for a in arms if a.compare_group == g and a.role == "baseline")
            typer.echo(f"compare: twinrun compare {out / 'compare' / g} --baseline {base}")


def _arms(models: list[tuple[str, str, object, str | None, str | None]], repos: list[tuple[str, str, object]]
          ) -> list[object]:
    """One arm per model; with --skills, each model without and with every skill repo (its own compare group)."""
    from twinrun.core.sft.agent_eval import EvalArm, checkpoint_fingerprint

    arms: list[EvalArm] = []
    for mi, (name, ck, gen, method, stage) in enumerate(models):
        fp = checkpoint_fingerprint(ck)
        base = mi == 0 and len(models) > 1
        if not repos:
            arms.append(EvalArm(name=name, checkpoint=ck, generate=gen, compare_group="models", checkpoint_hash=fp,
                                role="baseline" if mi == 0 else "checkpoint",
                                run=None if mi == 0 else "models", checkpoint_step=None if mi == 0 else mi,
                                method=method, stage=stage, base=base))
            continue
        arms.append(EvalArm(name=f"{name}", checkpoint=ck, generate=gen, skill_condition="without",
                            compare_group=name, role="baseline", checkpoint_hash=fp, method=method, stage=stage,
                            base=base))
        for ri, (rname, src, repo) in enumerate(repos):
            arms.append(EvalArm(name=f"{name}+{rname}", checkpoint=ck, generate=gen, skill_condition="with",
                                skills=repo, skills_source=src, compare_group=name, role="checkpoint",
                                run=f"with-skill:{name}", checkpoint_step=ri, checkpoint_hash=fp, method=method,
                                stage=f"{stage} + {rname}" if stage else None, base=base))
    return arms


def _games(settings: object) -> tuple[list[object], str]:
    """The test variations played (the pinned list, or drawn with the seed) and the line that says which."""
    from twinrun.core.envs.scienceworld import ScienceWorldCatalog
    from twinrun.core.sft.agent_eval import pinned_games, sample_games

    catalog = ScienceWorldCatalog(settings.split, tasks=settings.tasks)
    try:
        if settings.pinned:
            games, what = pinned_games(catalog, settings)
        else:
            games = sample_games(catalog.games(), settings.variations, settings.seed)
            what = (f"{len(games)} {settings.split} variations drawn with seed {settings.seed} (not the pinned "
                    "list)")
    finally:
        catalog.close()
    return games, what


def _load_skills(folder: Path, top_k: int) -> object:
    """A curated repo saved by twinrun (has skills.json) or a folder of human-written skills (immutable)."""
    from twinrun.core.skills.repository import MANIFEST_FILE, SkillRepo, import_human_skills

    if not folder.is_dir():
        raise TwinrunError(f"--skills: {str(folder)!r} is not a folder (fix: a skill repo folder)")
    if (folder / MANIFEST_FILE).is_file():
        return SkillRepo.load(folder, top_k=top_k)
    return SkillRepo(import_human_skills(folder), top_k=top_k)
