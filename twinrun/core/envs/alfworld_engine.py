"""ALFWorld's TextWorld-PDDL engine, started once and fed from per-game caches.

What raw textworld recomputes that does not depend on the episode, and what twinrun caches instead (per process):

- **PDDL -> SAS translation** (``fast_downward.pddl2sas``, ~0.3 s per call, raw textworld runs it twice on every
  ``load`` and every ``reset``): cached per (domain, problem). Each reset still builds a *new* ``PddlState`` from the
  cached translation and reloads the SAS text into the engine's planner library, so every episode starts from a
  fresh copy of the initial state. The optimised translation that only the planner expert uses (``replan``:
  policy commands, walkthroughs) is computed only for engines that need it; the others load the plain
  translation into that unused slot (checked: an engine that asks for policy commands without it is refused).
- **Game logic** (the grammar document of each game, parsed with TatSu, ~0.1-1 s): cached per (domain, grammar)
  text. The object is only read during play (its type hierarchy gains the same types at every reset, as in raw).
- **Grammar snippets** (``ContextSensitiveGrammar.derive`` re-parses every command template, feedback rule and
  rule right-hand side with TatSu on every step; the conditions are re-parsed as conjunctive queries): the parse
  trees are memoised by their text and handed out as deep copies, the query predicates are immutable values.

One more thing is not a cache but the same copy made faster: textgen deep-copies the variables and mapping of
every derivation context (``copy_context``, ~60 % of a step), through ``copy.deepcopy``'s generic reduce
protocol. :func:`copy_context` builds the same fresh objects (EntityInfo, Placeholder, Variable: every slot,
aliasing kept within each dict, as deepcopy does) directly, and hands anything else to ``copy.deepcopy``.

The caches are keyed by content (the texts themselves), so a changed game file is a different key, never a stale
hit. They are installed by swapping four module attributes of textworld for the duration of each engine call
(:func:`TextWorldAssets.patched`); a raw textworld engine used outside those calls runs textworld's own code.
Patched calls hold a process-wide lock, so two threads cannot interleave the swaps (textworld itself is not
thread-safe either: one engine thread per process, see :mod:`.pool`).

Memory: ~2 MB per cached game (the translation's task objects ~1.5 MB, its SAS text ~0.5 MB, the game logic);
``max_games`` bounds it (LRU). Not shared across worker processes: workers are spawned, a copy would have to
travel through pickles on disk, and the cold cost it would save is ~0.3 s per game per worker.

Started engines are kept in :class:`EngineCache` and reused for the next episode of *any* game with the same
expert: loading a game into an idle engine costs little once its assets are cached, and each engine holds its own
copy of fast-downward's library (~3 MB) that textworld never unloads, so starting a new engine per game leaks.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import sys
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterator
from typing import Any

DEFAULT_MAX_GAMES = 256  # covers an evaluation split (valid_seen 140, valid_unseen 134) sweep after sweep


class TextWorldAssets:
    """Per-process caches of what a game's engine derives from its file alone (see the module docstring).

    max_games: translations and game logics kept (least recently used dropped first)."""

    def __init__(self, max_games: int = DEFAULT_MAX_GAMES):
        if max_games < 1:
            raise ValueError(f"alfworld cache_games: {max_games} must be >= 1 (fix: 0 disables caching at the env)")
        self.max_games = max_games
        self._translations: OrderedDict[tuple[str, str, bool], tuple[Any, str]] = OrderedDict()
        self._logic: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._symbols: dict[tuple[Any, ...], Any] = {}
        self._queries: dict[str, tuple[Any, ...]] = {}
        self.stats: Counter[str] = Counter()
        self._replan = True

    # -- the cached replacements ------------------------------------------------------------------------------

    def translate(self, domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> tuple[Any, str]:
        """``fast_downward.pddl2sas``, cached. The optimised translation feeds only replanning: an engine that
        never replans gets the plain one in that slot (see :meth:`patched`)."""
        if optimize and not self._replan:
            optimize = False
            self.stats["replan_skipped"] += 1
        key = (domain, problem, optimize)
        hit = self._translations.get(key)
        if hit is not None:
            self._translations.move_to_end(key)
            self.stats["translation_hits"] += 1
            return hit
        import fast_downward

        argv = list(sys.argv)  # pddl2sas overwrites sys.argv for fast-downward's option parser
        try:
            hit = fast_downward.pddl2sas(domain, problem, verbose=verbose, optimize=optimize)
        finally:
            sys.argv[:] = argv
        self.stats["translations"] += 1
        self._translations[key] = hit
        _trim(self._translations, 2 * self.max_games)  # plain + optimised per game at most
        return hit

    def game_logic(self, domain: str, grammar: str) -> Any:
        key = (domain, grammar)
        logic = self._logic.get(key)
        if logic is None:
            logic = self._logic[key] = _textworld_originals()["GameLogic"](domain, grammar)
            self.stats["logic_parses"] += 1
            _trim(self._logic, self.max_games)
        else:
            self._logic.move_to_end(key)
        return logic

    def parse_symbols(self, *args: Any, **kwargs: Any) -> Any:
        """textgen's TatSu parse of a grammar snippet: the tree is parsed once per text, every caller gets a deep
        copy (the engine assigns each symbol its own context)."""
        key = (args, tuple(sorted(kwargs.items())))
        tree = self._symbols.get(key)
        if tree is None:
            tree = self._symbols[key] = _textworld_originals()["parse_symbols"](*args, **kwargs)
        return copy.deepcopy(tree)

    def parse_query(self, expr: str) -> Any:
        from textworld.logic import Rule

        pre = self._queries.get(expr)
        if pre is None:
            pre = self._queries[expr] = Rule.parse_conjunctive_query(expr).preconditions
        return Rule("query", pre, [])

    # -- installing them ----------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def patched(self, *, replan: bool) -> Iterator[None]:
        """Route textworld's PDDL engine through these caches for the duration of one engine call.

        replan: whether this engine may replan (planner expert); if not, the optimised translation is skipped."""
        from textworld.envs.pddl import logic as pddl_logic
        from textworld.envs.pddl import textgen

        _textworld_originals()
        with _PATCH_LOCK:
            saved = (pddl_logic.fast_downward, pddl_logic.GameLogic, textgen._parse_and_convert, textgen.Rule,
                     textgen.copy_context, self._replan)
            pddl_logic.fast_downward = _FastDownward(self)
            pddl_logic.GameLogic = self.game_logic
            textgen._parse_and_convert = self.parse_symbols
            textgen.Rule = _RuleQueries(self)
            textgen.copy_context = copy_context
            self._replan = replan
            try:
                yield
            finally:
                (pddl_logic.fast_downward, pddl_logic.GameLogic, textgen._parse_and_convert, textgen.Rule,
                 textgen.copy_context, self._replan) = saved

    def sizes(self) -> dict[str, int]:
        return {"translations": len(self._translations), "logics": len(self._logic), "snippets": len(self._symbols),
                "queries": len(self._queries)}


def copy_context(context: dict[str, Any]) -> dict[str, Any]:
    """textgen's ``copy_context`` (state and facts shared, variables and mapping deep-copied, each with its own
    memo), with the deep copy of the values textgen puts there done directly."""
    return {
        "state": context["state"],
        "facts": context["facts"],
        "variables": _deepcopy_dict(context["variables"]),
        "mapping": _deepcopy_dict(context["mapping"]),
        "entity_infos": context["entity_infos"],
    }


def _deepcopy_dict(d: dict[Any, Any]) -> dict[Any, Any]:
    memo: dict[int, Any] = {}
    return {_deepcopy_value(k, memo): _deepcopy_value(v, memo) for k, v in d.items()}


def _deepcopy_value(value: Any, memo: dict[int, Any]) -> Any:
    """``copy.deepcopy(value, memo)`` for textgen's context values; a slotted value class (no custom copy hooks)
    is rebuilt as deepcopy's reduce protocol rebuilds it: ``cls.__new__`` plus every set slot, deep-copied."""
    cls = type(value)
    slots = _slotted_value_classes().get(cls)
    if slots is None:
        return copy.deepcopy(value, memo)
    hit = memo.get(id(value))
    if hit is not None:
        return hit
    new = memo[id(value)] = cls.__new__(cls)
    for name in slots:
        attr = getattr(value, name, _UNSET)
        if attr is _UNSET:
            continue
        setattr(new, name, attr if type(attr) in _ATOMIC else copy.deepcopy(attr, memo))
    return new


_UNSET = object()
_ATOMIC = frozenset({str, int, float, bool, type(None)})  # deepcopy returns these as they are


@functools.cache
def _slotted_value_classes() -> dict[type, tuple[str, ...]]:
    from textworld.generator.game import EntityInfo
    from textworld.logic import Placeholder, Variable

    out = {}
    for cls in (EntityInfo, Placeholder, Variable):
        plain = (cls.__bases__ == (object,) and "__slots__" in vars(cls) and not hasattr(cls, "__deepcopy__")
                 and not hasattr(cls, "__setstate__") and cls.__reduce_ex__ is object.__reduce_ex__
                 and cls.__reduce__ is object.__reduce__ and cls.__getstate__ is object.__getstate__)
        if plain:  # else a future textworld customises copying: copy.deepcopy does it
            out[cls] = tuple(cls.__slots__)
    return out


_PATCH_LOCK = threading.RLock()


def _trim(cache: OrderedDict, cap: int) -> None:
    while len(cache) > cap:
        cache.popitem(last=False)


class _FastDownward:
    """Stands in for the `fast_downward` module inside textworld's PDDL logic: translation from the cache, every
    other attribute (the library loader, ctypes structures, the translator's classes) from the real module."""

    def __init__(self, assets: TextWorldAssets):
        self._assets = assets

    def pddl2sas(self, domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> tuple[Any, str]:
        return self._assets.translate(domain, problem, verbose, optimize)

    def __getattr__(self, name: str) -> Any:
        import fast_downward

        return getattr(fast_downward, name)


class _RuleQueries:
    """Stands in for `textworld.logic.Rule` inside textgen, which only calls ``Rule.parse_conjunctive_query``."""

    def __init__(self, assets: TextWorldAssets):
        self._assets = assets

    def parse_conjunctive_query(self, expr: str) -> Any:
        return self._assets.parse_query(expr)

    def __getattr__(self, name: str) -> Any:
        from textworld.logic import Rule

        return getattr(Rule, name)


@functools.cache
def _textworld_originals() -> dict[str, Any]:
    """textworld's own functions, captured before any patch is installed (importing textworld is deferred until an
    engine runs)."""
    from textworld.envs.pddl import logic as pddl_logic
    from textworld.envs.pddl import textgen

    return {"GameLogic": pddl_logic.GameLogic, "parse_symbols": textgen._parse_and_convert}


_SHARED: TextWorldAssets | None = None


def shared_assets(max_games: int = DEFAULT_MAX_GAMES) -> TextWorldAssets:
    """The process's asset cache (one per process; the first caller's `max_games` sets its bound)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = TextWorldAssets(max_games)
    return _SHARED


def start_textworld(path: str, expert_type: str | None) -> Any:
    """``textworld.start`` with ALFWorld's wrappers: the raw engine, as alfworld plays it (and as benches and the
    identity check use it)."""
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert, AlfredInfos

    extras = ["gamefile"]
    wrappers: list[Any] = [AlfredDemangler(shuffle=False), AlfredInfos]
    if expert_type:
        extras.append("expert_plan")
        wrappers.append(AlfredExpert(expert_type=expert_type))  # keyword: alfworld 0.4.2 positional bug
    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=extras)
    return textworld.start(path, request_infos=infos, wrappers=wrappers)


class EngineCache:
    """Started engines, idle between episodes. An engine is checked out for one episode at a time (two episodes
    never share state); an idle engine that last played the same game is handed out as is, otherwise the least
    recently used idle engine of the same expert type is loaded with the new game.

    assets: the per-game caches (None: raw textworld, every game translated at every load and reset)."""

    def __init__(self, max_idle: int = 16, assets: TextWorldAssets | None = None):
        self.max_idle = max_idle
        self.assets = assets
        self._idle: OrderedDict[int, tuple[str, str | None, Any]] = OrderedDict()  # id -> (path, expert, engine)
        self.starts = 0  # engines started (each loads its own fast-downward library)
        self.loads = 0  # games loaded into an already started engine

    def scope(self, expert_type: str | None) -> contextlib.AbstractContextManager:
        """The context every call into an engine of this cache runs in."""
        if self.assets is None:
            return contextlib.nullcontext()
        return self.assets.patched(replan=expert_type == "planner")

    def checkout(self, path: str, expert_type: str | None) -> Any:
        for key, (p, e, engine) in reversed(self._idle.items()):
            if p == path and e == expert_type:
                del self._idle[key]
                return engine
        with self.scope(expert_type):
            if self.assets is not None:
                for key, (_, e, engine) in self._idle.items():
                    if e == expert_type:
                        del self._idle[key]
                        engine.load(path)
                        self.loads += 1
                        return engine
            self.starts += 1
            engine = start_textworld(path, expert_type)
        if engine.request_infos.policy_commands and expert_type != "planner":
            raise RuntimeError("alfworld engine asks for policy commands without the replanning translation")
        return engine

    def checkin(self, path: str, expert_type: str | None, engine: Any) -> None:
        self._idle[id(engine)] = (path, expert_type, engine)
        while len(self._idle) > self.max_idle:
            _, (_, _, old) = self._idle.popitem(last=False)
            close_quietly(old)

    def close(self) -> None:
        for _, _, engine in self._idle.values():
            close_quietly(engine)
        self._idle.clear()


def close_quietly(env: Any) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001 - closing a broken engine must not mask the original error
        pass
