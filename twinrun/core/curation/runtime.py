"""The curation runtime (one per training job and process, shared by every session: event loop, env pool,
executor, reward settings, judge, token counter, first-position cache). Sessions are made by
:meth:`CurationRuntime.session`; this module imports the session's, never the other way round (what both need, the
prompts, is :mod:`twinrun.core.curation.prompts`)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from twinrun.core.advantages.anchors import anchor_key
from twinrun.core.envs import EnvPool, GameCatalog, GameRef, make_catalog, make_pool
from twinrun.core.executors import BackgroundLoop, Executor, make_executor
from twinrun.core.executors.react import Episode
from twinrun.core.records import Provenance
from twinrun.core.rewards.composite import TokenCounter, whitespace_tokens
from twinrun.core.skills.repository import SkillRepo, render_for_prompt
from twinrun.core.envs.task_groups import CurationError, TaskGroup, TaskGroupSampler, stable_int
from twinrun.core.curation.prompts import CuratorPrompts
from twinrun.core.curation.session import CurationSession
from twinrun.core.curation.toolcalls import CURATE_TOOL



# ------------------------------------------------------------------------------------------------------------
# Runtime: one per training job (per process); shared by every session


class CurationRuntime:
    """Everything sessions share: the event loop, the env pool, the executor (its concurrency bound covers all
    episodes of a step), the reward settings, the judge, the token counter and the first-position cache.

    count_tokens: text -> token count for r_comp; default :func:`whitespace_tokens` (tests and CPU smoke runs);
    pass the curator's tokenizer (``rewards.token_counter(tok)``) in real runs."""

    def __init__(
        self,
        *,
        env_name: str,
        pool: EnvPool,
        executor: Executor,
        curator_prompts: CuratorPrompts,
        reward: Any,
        new_repo: Callable[[], SkillRepo],
        top_k: int = 5,
        group_size: int = 10,
        judge: Any = None,
        count_tokens: TokenCounter | None = None,
        share_first_position: bool = False,
        seed: int = 0,
        catalog: GameCatalog | None = None,
        groups_per_step: int = 1,
        task_types: Sequence[str] | None = None,
        provenance: Provenance | None = None,
        loop: BackgroundLoop | None = None,
        owns_pool: bool = True,
        include_thoughts: bool = False,
        first_position_cache_size: int = 4096,
        anchor: str = "position_outcome",
        anchor_match: str = "exact",
        correctness_judge: Any = None,
    ):
        self.env_name = env_name
        self.pool = pool
        self.executor = executor
        self.curator_prompts = curator_prompts
        self.reward_spec = reward
        self.new_repo = new_repo
        self.top_k = top_k
        self.group_size = group_size
        self.judge = judge
        self.count_tokens: TokenCounter = count_tokens or whitespace_tokens
        self.share_first_position = share_first_position
        self.seed = seed
        self.catalog = catalog
        self.provenance = provenance
        self.include_thoughts = include_thoughts
        anchor_key(anchor, position=1, game_id="", correctness="", input_digest="")  # an unknown kind fails here
        self.anchor = anchor
        self.anchor_match = anchor_match
        self.correctness_judge = correctness_judge  # None: the curator reads the environment's outcome
        self.loop = loop or BackgroundLoop()
        self._owns_loop = loop is None
        self._owns_pool = owns_pool
        self._first: OrderedDict[str, asyncio.Future] = OrderedDict()
        self._first_cap = first_position_cache_size
        self.sampler = (
            TaskGroupSampler(catalog, group_size, groups_per_step=groups_per_step, task_types=task_types, seed=seed)
            if catalog is not None else None
        )

    # -- construction from a spec
    @classmethod
    def from_spec(
        cls,
        spec: Any,
        *,
        data_root: str | Path | None = None,
        environ: Mapping[str, str] | None = None,
        judge: Any = "spec",
        count_tokens: TokenCounter | None = None,
        split: str | None = None,
        workers: int | None = None,
        provenance: Provenance | None = None,
        executor: Executor | None = None,
        api_key: str | None = None,
    ) -> CurationRuntime:
        """Runtime for an ExperimentSpec. data_root: the ALFWorld data folder (else ``environ['ALFWORLD_DATA']``
        when the caller passes its environment). judge: "spec" builds the spec's judge; pass an object or None to
        override. split: defaults to environment.split (training groups). workers: override environment.workers
        (0 = engines in this process, for tests)."""
        env = spec.environment
        root = None
        if env.name == "alfworld":
            from twinrun.core.envs.alfworld import resolve_alfworld_data

            root = resolve_alfworld_data(data_root, environ)
        catalog = make_catalog(env.name, split or env.split, data_root=root, task_types=env.task_types)
        executor = executor or make_executor(spec, api_key=api_key, environ=environ)
        pool = make_pool(env.name, env.workers if workers is None else workers, expert=bool(executor.policy.needs_expert))
        if judge == "spec":
            from twinrun.core.rewards.judges import judge_for_experiment

            judge = judge_for_experiment(spec)
        prompts = CuratorPrompts.from_files(spec.prompt_path("curator_system"), spec.prompt_path("curator_input"))
        from twinrun.core.rewards.correctness import correctness_judge_for

        return cls(
            env_name=env.name, pool=pool, executor=executor, curator_prompts=prompts, reward=spec.reward,
            new_repo=lambda: SkillRepo.for_experiment(spec), top_k=spec.retrieval.top_k, group_size=env.group_size,
            judge=judge, count_tokens=count_tokens, share_first_position=env.share_first_position, seed=spec.seed,
            catalog=catalog, groups_per_step=spec.batch.groups_per_step, task_types=env.task_types,
            provenance=provenance, anchor=spec.algorithm.gigpo.anchor, anchor_match=spec.algorithm.gigpo.anchor_match,
            correctness_judge=correctness_judge_for(spec, spec.curation.correctness, api_key=api_key,
                                                    environ=environ),
        )

    # -- what a backend needs besides sessions
    @property
    def curator_system_prompt(self) -> str:
        return self.curator_prompts.system

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The curator's tool list: exactly one tool, ``curate``."""
        return [CURATE_TOOL]

    def task_group(self, step: int, index: int) -> TaskGroup:
        if self.sampler is None:
            raise CurationError("task_group: this runtime has no catalogue (fix: pass catalog= or use from_spec)")
        return self.sampler.group(step, index)

    def session(self, group: TaskGroup | Mapping[str, Any], rollout_index: int) -> CurationSession:
        g = group if isinstance(group, TaskGroup) else TaskGroup.from_row(group)
        if len(g.games) != self.group_size:
            raise CurationError(
                f"task group {g.group_id}: {len(g.games)} games but environment.group_size={self.group_size} "
                "(fix: draw groups with this runtime's sampler)"
            )
        return CurationSession(self, g, rollout_index)

    def close(self) -> None:
        try:
            self.loop.run(self.executor.aclose())
        except Exception:  # noqa: BLE001
            pass
        if self._owns_pool:
            self.pool.close()
        if self._owns_loop:
            self.loop.close()
        close_judge = getattr(self.judge, "close", None)
        if close_judge is not None:
            close_judge()

    def __enter__(self) -> CurationRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- episode play (runs on self.loop)
    async def _play(self, game: GameRef, repo: SkillRepo, *, seed: int, position: int) -> tuple[Episode, list[str]]:
        return await play_with_repo(self.executor, self.pool, game, repo, top_k=self.top_k, seed=seed, position=position)

    async def _shared_first(self, group: TaskGroup, repo: SkillRepo) -> tuple[Episode, list[str], bool]:
        """Position 1 of `group`, played once per runtime; returns (episode, retrieved, played_here)."""
        key = f"{group.group_id}|{group.games[0].game_id}|{self.executor.settings_hash}"
        fut = self._first.get(key)
        if fut is not None:
            episode, retrieved = await asyncio.shield(fut)
            return episode, retrieved, False
        fut = asyncio.get_running_loop().create_future()
        self._first[key] = fut
        while len(self._first) > self._first_cap:
            self._first.popitem(last=False)
        try:
            result = await self._play(group.games[0], repo, seed=stable_int("episode", self.seed, group.group_id, "shared", 1),
                                      position=1)
        except asyncio.CancelledError:
            self._first.pop(key, None)
            fut.cancel()
            raise
        except Exception as e:
            self._first.pop(key, None)
            fut.set_exception(e)
            fut.exception()  # mark retrieved (no 'never retrieved' warning); waiters re-raise it
            raise
        fut.set_result(result)
        return result[0], result[1], True


async def play_with_repo(executor: Executor, pool: EnvPool, game: GameRef, repo: SkillRepo | None, *, top_k: int = 5,
                         seed: int = 0, position: int | None = None) -> tuple[Episode, list[str]]:
    """Play one game on a pool lease with the top-k skills BM25-retrieved from `repo` for the game's task (None
    or an empty repo: no skills). Returns the episode and the retrieved skill names. Also what sweeps use."""
    retrieved: list[str] = []

    def retrieve(task: str) -> tuple[str, list[str]]:
        skills = repo.retrieve(task, top_k) if repo is not None and top_k > 0 and len(repo) else []
        retrieved[:] = [s.name for s in skills]
        return (render_for_prompt(skills) if skills else ""), list(retrieved)

    lease = pool.lease()
    try:
        episode = await executor.play(lease, game, retrieve=retrieve, seed=seed, position=position)
    finally:
        lease.close()
    return episode, retrieved
