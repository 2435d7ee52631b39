"""The findings block of docs/findings.md (between its findings:start / findings:end markers): every number in it
comes from experiments/controls/analyse.py's findings (the committed rows through compare's own function), rendered
here. tests/test_controls_findings.py recomputes the block and fails when the page differs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FINDINGS = ROOT / "docs" / "findings.md"
START, END = "<!-- findings:start (generated: experiments/controls/analyse.py findings --write) -->", "<!-- findings:end -->"


def figure_path(name: str) -> Path:
    """Where docs/findings.md's figure of a control is (compare's framework-curves plot of it)."""
    return FINDINGS.parent / "img" / f"controls-{name}.png"


def _pp(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:+.1f} pp"


def _ci(ci: Any, scale: float = 1.0, fmt: str = "{:.2f}") -> str:
    if not ci or ci[0] is None:
        return "–"
    return "[" + ", ".join(fmt.format(scale * v) for v in ci) + "]"


def _p(p: float | None) -> str:
    return "–" if p is None else (f"{p:.3f}" if p >= 0.001 else "< 0.001")


def render(f: dict[str, Any], power: Any) -> str:
    """The markdown block docs/findings.md carries (every number in it comes from here); power: power.py beside
    this file (its constants name the paper-shaped sweep and the budgets' grid)."""
    lines = [START, ""]
    for name, c in f.items():
        lines.append(f"### {name}: {', '.join(c['runs'])} (truth: {c['truth']})")
        lines.append("")
        icc, blocks = c["icc"] or {}, c["blocks"] or {}
        lines.append(f"- design: {c['streams']} streams x {c['games_per_stream']:.1f} measured games (mean) per checkpoint, streams "
                     f"{c['design']}; baseline success {100 * c['baseline_rate']:.1f}%")
        if icc:
            lines.append(f"- stream correlation (ICC): {icc['estimate']:.3f} {_ci(icc['ci'], fmt='{:.3f}')}, "
                         f"design effect {icc['deff']:.2f}")
        if blocks:
            lines.append(f"- share of the stream variance a run's stream block carries: {blocks['share']:.2f} "
                         f"{_ci(blocks['ci'])}; error SD of a stream's lift {100 * blocks['sd_nested']:.1f} pp nested, "
                         f"{100 * blocks['sd_blocked']:.1f} pp after the blocks")
        for cmp in c["frameworks"]:
            an = cmp.get("anova") or {}
            head = (f"- framework verdict, {cmp['a']} ({cmp['seeds_a']} seed(s)) vs {cmp['b']} ({cmp['seeds_b']} seed(s)): "
                    f"**{cmp.get('verdict') or 'none'}**")
            if cmp.get("reason"):
                head += f" (reason {cmp['reason']})"
            lines.append(head)
            if an:
                lines.append(f"  - framework x checkpoint F {an['statistic']:.2f} on ({an['df1']}, {an['df2']}) df, "
                             f"{an['epsilon_method']} epsilon {an['epsilon']:.2f}, p {_p(an['p_value'])}; seed SD of a "
                             f"run's centred lift {100 * an['seed_sd']:.1f} pp")
            if cmp.get("pearson") is not None:
                eq = cmp.get("equivalence") or {}
                lines.append(f"  - r of the mean curves {cmp['pearson']:.2f} {_ci(cmp.get('pearson_ci'))}; 90% band "
                             f"half-width {100 * eq.get('half_width_max', float('nan')):.1f} pp against delta "
                             f"{100 * eq.get('delta', float('nan')):.1f} pp")
            if cmp.get("note"):
                lines.append(f"  - {cmp['note']}")
        lines += _reading_lines(c)
        if any(cmp.get("checkpoints") for cmp in c["frameworks"]):
            rel = figure_path(name).relative_to(FINDINGS.parent).as_posix()
            lines.append(f"- figure: ![{name}: each framework's seeds and mean curve; the difference of the centred "
                         f"means with its 90% band]({rel})")
        for p in c["pairs"]:
            lines.append(f"- run pair {p['a']} vs {p['b']} ({p['relation'] or 'frameworks unknown'}): {p['verdict']}, "
                         f"interaction p {_p(p['interaction_p'])}")
        for run, cv in c["curves"].items():
            lines.append(f"- {run}: lift by checkpoint " + ", ".join(
                f"{k}: {_pp(v)}" for k, v in zip(cv["checkpoints"], cv["lifts"])))
        ps = c.get("paper")
        if ps:
            fw = ", ".join(f"{n} seed{'s' if n > 1 else ''}: " + ("no test (seed and framework confounded)" if d is None
                                                                 else f"{100 * d:.0f} pp")
                           for n, d in ps["framework"].items())
            lines.append(f"- a sweep shaped like the paper's ({power.PAPER['games']} games, one stream, {power.PAPER['checkpoints']} "
                         f"checkpoints), at this rho and seed spread, detects at 80% power: a checkpoint's lift of "
                         f"{100 * ps['lift']:.0f} pp {_ci(ps['lift_ci'], 100, '{:.0f}')} ({100 * ps['lift_independent']:.0f} "
                         f"pp if its games were independent); a difference between two frameworks' centred curves at "
                         f"one checkpoint of {fw} (seed SD of a run's centred lift {100 * ps['seed_sd']:.1f} pp here, "
                         f"{100 * ps['seed_sd_own']:.1f} pp once this sweep's stream noise is taken out)")
        sp = c.get("seed_spread")
        if sp:
            lines.append(f"- seed spread: SD of a run's centred lift between the {sp['runs']} seeds {100 * sp['sd']:.1f} pp "
                         f"(pooled over checkpoints); a cell's stream noise {100 * sp['cell_noise_sd']:.1f} pp of it, the "
                         f"seeds' own {100 * sp['sd_own']:.1f} pp")
        lines += _budget_lines(c, power)
        k = c["cost"]
        lines.append(f"- cost: {k['sweep_episodes']:,} sweep episodes ({k['sweep_s'] / 60:.0f} min of game play), "
                     f"{k['train_episodes']:,} training episodes ({k['train_s'] / 60:.0f} min of training steps)")
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


DESIGN_WORDS = {"independent": "independent (seeds nested in groups: the split-plot F)",
                "paired": "paired (seed i of both groups as a block: the within-seed difference profiles)"}


def _reading_lines(c: dict[str, Any]) -> list[str]:
    """The framework test under each seed design that applies, the control's own marked, with its permutation
    check (analyse.readings)."""
    rd = c.get("readings") or {}
    if not rd:
        return []
    out = [(f"- the framework test under each seed design, this control read **{c['seed_design']}**; permutation "
            "check: the true split's rank among every relabelling of the runs (1 = largest F; rank / n the "
            "permutation p; `analyse.py permutations` lists them)")]
    for design, r in rd.items():
        pc = r.get("permutation")
        perm = "" if pc is None else (f"; rank {pc['rank']} of {pc['n']}" + (
            " (F of all: " + ", ".join(f"{x:.2f}" for x in pc["all"]) + ")" if pc["n"] <= 16 else ""))
        pair = f", mean r of a seed's two centred curves {r['pair_r_mean']:.2f}" if r.get("pair_r_mean") is not None else ""
        out.append(f"  - {DESIGN_WORDS[design]}{' (this control)' if design == c['seed_design'] else ''}: F "
                   f"{r['statistic']:.2f} on ({r['df1']}, {r['df2']}) df, epsilon {r['epsilon']:.2f}, p "
                   f"{_p(r['p_value'])}{pair}{perm}")
    return out


def _budget_lines(c: dict[str, Any], power: Any) -> list[str]:
    """The verdict budget (power.verdict_budget), the seed-profile model it draws from, and the check of what each
    Monte Carlo predicts for this control's own design (power.design_check)."""
    out = []
    ag, sm, ck = c.get("budget"), c.get("seed_model"), c.get("check")
    if sm:
        out.append(f"- seed-profile model (pooled over the {sm['runs']} runs of {', '.join(sm['groups'])}): a seed's "
                   f"own deviation {100 * sm['sd_own']:.1f} pp per checkpoint (RMS over checkpoints; covariance on "
                   f"{sm['df_own']} df), {100 * sm['sd_shared']:.1f} pp of it shared by two groups' runs at one seed "
                   f"({100 * sm['shared_share']:.0f}% of the variance; {sm['df_shared']} df); a stream's blocked error "
                   f"{100 * sm['cell_sd']:.1f} pp")
    if ag:
        reach = "; ".join(f"{r['seeds']} seeds per framework: " + (
            f"{r['streams']} streams ({r['episodes']:,} sweep episodes, P {r['p']:.2f})"
            if r["streams"] else f"not within {power.BUDGET_STREAMS[-1]} streams") for r in ag["rows"])
        truth = ("both frameworks follow this control's mean centred curve" if ag["want"] == "agree"
                 else "each group follows its own mean centred curve as measured")
        margin = f" (margin +-{100 * ag['delta']:.0f} pp)" if ag["want"] == "agree" else ""
        draw = ("seed deviations drawn as profiles (the model above)" if ag["model"] == "profile" else
                "seed deviations drawn independently per checkpoint")
        out.append(f"- the budget at which the framework verdict says \"{ag['want']}\"{margin} with probability "
                   f"{ag['power']:.1f} when {truth}, {ag['design']} design ({draw}, seeds' own SD "
                   f"{100 * ag['seed_sd_own']:.1f} pp, stream noise as measured; {ag['draws']} draws through compare's "
                   f"decision, {c['games_per_stream']:.0f} games per stream): {reach}; this control's own design "
                   f"({ag['here']['seeds']} seeds, {ag['here']['streams']} streams): P {ag['here']['p']:.2f}")
    if ck:
        out.append(f"- what each Monte Carlo predicts at this control's own design ({ck['seeds']} seeds, "
                   f"{ck['streams']} streams, the seeds paired as here; {ck['draws']} draws each): the first budget's "
                   f"draw (independent checkpoints) with the split-plot test P {ck['iid_independent']:.2f}; seed "
                   f"profiles with the split-plot test P {ck['profile_independent']:.2f}; seed profiles with the "
                   f"paired test P {ck['profile_paired']:.2f}")
    return out


def doc_block(text: str) -> str | None:
    if START not in text or END not in text:
        return None
    return text[text.index(START): text.index(END) + len(END)]


