"""The ScienceWorld agent-evaluation protocol (`twinrun eval-agent`) and its statistics.

Protocol (defaults; every one is a setting and is written into the results):
- the test variations: the **pinned list** of 200 (task, variation) pairs shipped with twinrun
  (:mod:`~twinrun.core.sft.agent_eval.protocol`), checked against the installed simulator; the same list for every
  arm, so arms pair per variation (``--variations N`` plays a seeded draw of N of them);
- ``passes`` (4) independent passes over that list; pass p plays variation v with sampling seed
  ``hash(seed, p, v)`` in *every* arm (common random numbers: the pairing is per game and per pass);
- the AgentGym ReAct conversation of :mod:`twinrun.core.sft.data` (instruction + action list, canned
  acknowledgement, one user turn per observation; the whole conversation is the context), temperature 0.4,
  at most 30 rounds (replies), 512 new tokens per reply, thinking off;
- an episode's **final score** is ScienceWorld's score after its last action, as is (it can be negative: the
  simulator gives -100 for a task failed irrecoverably); **success** is final score 100;
- per pass: **Avg@1** = mean final score / 100 over the measured variations (never clamped to [0, 1]) and the
  success rate; reported as mean ± sample std (ddof 1) over passes;
- between two arms: a **paired bootstrap** over variations of the per-variation mean over passes; arms within
  re-evaluation noise of the best arm are flagged;
- the **literal template-copy share** (the study's metric): replies whose action is literally one of
  ``settings.literal_copies`` (default ``open/close OBJ``), beside the **any-template share** (any templated
  entry of the action list: ``OBJ``/``LOC`` placeholders, ``a/b`` alternatives, ``[...]`` parts); see
  :mod:`twinrun.core.sft.template_copy`;
- with/without-skill arms: the same games and seeds played with the executor's retrieved skills (BM25 top-k over
  the task description, from a curated or human-written repo folder) and without; paired per game, and written
  as sweep-style ``eval`` rows so ``twinrun compare`` reports them as a family; the skill-free transfer
  comparison pairs each trained model without skills against the base model with skills.

Infrastructure failures (generation endpoint, simulator) make an episode ``unmeasured``: it leaves every
denominator and is counted, never scored as a failure.
"""

from twinrun.core.sft.agent_eval.episode import (
    SUCCESS_SCORE,
    ContextFull,
    EpisodeResult,
    GenerateFn,
    Segment,
    episode_trajectory,
    play_react_episode,
    play_stitched_episode,
    skills_instruction,
)
from twinrun.core.sft.agent_eval.generators import checkpoint_fingerprint, hf_generator, openai_generator
from twinrun.core.sft.agent_eval.protocol import (
    PINNED_VARIATIONS_FILE,
    AgentEpisodeRow,
    AgentEvalSettings,
    draw_pinned_variations,
    episode_seed,
    load_pinned_variations,
    pinned_games,
    sample_games,
)
from twinrun.core.sft.agent_eval.run import EvalArm, run_agent_eval, summarize_run
from twinrun.core.sft.agent_eval.stats import (
    ArmScores,
    arm_scores,
    avg_at_1,
    compare_arms,
    mean_std,
    paired_bootstrap,
    per_variation_means,
    success_rate,
    summarize_arm,
    within_noise,
)
from twinrun.core.sft.agent_eval.table import render_table
from twinrun.core.sft.template_copy import (
    copied_template,
    is_literal_copy,
    is_template,
    literal_copy_counts,
    normalize_action,
    prompt_action_list,
    template_copy_counts,
)

__all__ = [
    "PINNED_VARIATIONS_FILE", "SUCCESS_SCORE", "AgentEpisodeRow", "AgentEvalSettings", "ArmScores", "ContextFull",
    "EpisodeResult", "EvalArm", "GenerateFn", "Segment", "arm_scores", "avg_at_1", "checkpoint_fingerprint",
    "compare_arms", "copied_template", "draw_pinned_variations", "episode_seed", "episode_trajectory",
    "hf_generator", "is_literal_copy", "is_template", "literal_copy_counts", "load_pinned_variations", "mean_std",
    "normalize_action", "openai_generator", "paired_bootstrap", "per_variation_means", "pinned_games",
    "play_react_episode", "play_stitched_episode", "prompt_action_list", "render_table", "run_agent_eval",
    "sample_games", "skills_instruction", "success_rate", "summarize_arm", "summarize_run", "template_copy_counts",
    "within_noise",
]
