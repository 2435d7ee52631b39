"""A tiny random Qwen3 curator that builds offline, for CPU tests and the smoke arm.

`build_tiny_qwen3(out_dir)` makes a random `Qwen3ForCausalLM` (hidden 64, 2 layers, every layer with a 384-token
sliding attention window by default; see its docstring) and a byte-level
BPE tokenizer trained locally with `tokenizers` on a small embedded corpus of ALFWorld observations, SKILL.md
text and `curate` tool calls (so common words and JSON punctuation get their own tokens and sequences stay
short). The tokenizer carries TRL's own Qwen3 chat template *text*, read from the installed TRL at build time:
TRL recognises templates by exact string match (tool-call parsing, the training-template swap), so a copy that
drifted from TRL's would break it.

The result is cached under ``out_dir/tiny-qwen3-<key>/`` where the key hashes everything that determines the
files (arguments, corpus, template text, builder version), so a changed corpus or TRL template builds a new
model instead of reusing a stale one. Building is atomic (temp folder + rename): concurrent builders never see
a half-written model. No network: nothing here touches the model hub.

Specs name the model ``tiny-qwen3``; :func:`resolve_model` maps that name to the built (random) folder. Training
backends start from the warm-started copy instead (:func:`twinrun.models.warmstart.resolve_curator_model`), so that the
tiny curator actually writes ``curate`` tool calls.

torch / transformers / tokenizers are imported inside the functions: importing this module is free.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from twinrun.core.errors import DependencyMissing, TwinrunError

TINY_QWEN3 = "tiny-qwen3"

# The tiny curator's shape for vLLM's CPU backend (issue 51), a second shape beside the smoke arm's: head_dim 32
# (64 / 2 heads; vLLM's CPU attention refuses head_dim 16, "Unsupported CPU attention configuration") and full
# attention (the default's sliding window fails the CPU backend's block-size check on AVX2). The smoke arm keeps
# its own shape, so the demo's numbers stay where they were measured; the vLLM tests build this one
# (:func:`twinrun.models.warmstart.warm_started_tiny_curator` with ``shape=VLLM_SHAPE``).
VLLM_SHAPE: dict[str, Any] = {"heads": 2, "kv_heads": 1, "sliding_window": None}

# Bump when the build procedure changes in a way the arguments do not capture.
_BUILDER_VERSION = 2

# The Qwen3 family's special/added tokens. `<|endoftext|>` pads, `<|im_end|>` ends a turn (eos).
# The tool and think markers are added (non-special) tokens as in Qwen3's own tokenizer: they stay in decoded
# text (so TRL's tool-call parser sees `<tool_call>`), yet each is one token the tiny model can learn.
_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_ADDED_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]

# A small corpus in the curator's world. Not meant to be realistic language, only to give the BPE merges
# the words and punctuation the smoke arm actually emits (chat markup, JSON, ALFWorld verbs and objects).
_CORPUS = r"""
You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a cabinet 2, a countertop 1,
a countertop 2, a drawer 1, a fridge 1, a garbagecan 1, a microwave 1, a shelf 1, a sinkbasin 1, a stoveburner 1,
a toaster 1, a coffeemachine 1, a diningtable 1, a desk 1, a bed 1, a sidetable 1, a dresser 1, a sofa 1.
Your task is to: put a clean apple in fridge.
Your task is to: heat some egg and put it in countertop.
Your task is to: cool some lettuce and put it in diningtable.
Your task is to: look at alarmclock under the desklamp.
Your task is to: put two cellphone in bed.
Your task is to: find two pillow and put them in sofa.
Your task is to: examine the book with the desklamp.
Your task is to: put some spraybottle on toilet.
> go to countertop 1
On the countertop 1, you see a apple 1, a bread 1, a butterknife 2, a egg 1, a knife 1, a lettuce 1, a mug 2.
> take apple 1 from countertop 1
You pick up the apple 1 from the countertop 1.
> go to sinkbasin 1
On the sinkbasin 1, you see nothing.
> clean apple 1 with sinkbasin 1
You clean the apple 1 using the sinkbasin 1.
> go to fridge 1
The fridge 1 is closed.
> open fridge 1
You open the fridge 1. The fridge 1 is open. In it, you see a potato 1, a tomato 2.
> move apple 1 to fridge 1
You move the apple 1 to the fridge 1.
> heat egg 1 with microwave 1
You heat the egg 1 using the microwave 1.
> cool lettuce 1 with fridge 1
You cool the lettuce 1 using the fridge 1.
> use desklamp 1
You turn on the desklamp 1.
> examine alarmclock 1
> inventory
You are carrying: a apple 1.
> look
Nothing happens.
You won! Task completed. Task failed. Episode ended after 30 steps.
---
name: clean-then-place
description: Clean an object at a sinkbasin before placing it in the target receptacle.
---
# Clean then place
1. Find the object: check countertops, cabinets, drawers and the diningtable first.
2. Take the object, go to sinkbasin 1 and clean it with the sinkbasin.
3. Go to the target receptacle; open it if it is closed; move the object to it.
Pitfalls: the object must be in your inventory before you clean it. Do not put it down before cleaning.
---
name: heat-with-microwave
description: Heat an object with the microwave, then place it.
---
# Heat with microwave
1. Take the object. 2. Go to microwave 1 and heat the object with it. 3. Place it in the target.
---
name: cool-with-fridge
description: Cool an object with the fridge, then place it where the task says.
---
---
name: look-under-lamp
description: Examine an object under a desklamp: take the object, go to the desklamp, use it.
---
---
name: find-two-objects
description: For pick-two tasks, place the first object before searching for the second.
---
Skill repository: no skills yet. Retrieved skills: none.
Previous task: put a clean apple in fridge. Outcome: success. Steps: 9. Trajectory follows.
Previous task: heat some egg and put it in countertop. Outcome: failure. Steps: 30.
Update the skill repository so that the executor succeeds on the next task. Insert new skills, update
existing skills, or delete skills that mislead the executor.
<tool_call>
{"name": "curate", "arguments": {"operations": [{"function": "new_skill_insert", "arguments": {"skill_name": "clean-then-place", "content": "---\nname: clean-then-place\ndescription: Clean an object first.\n---\n# Steps\n1. Take it.\n2. Clean it with sinkbasin 1.\n3. Move it to the target."}}]}}
</tool_call>
<tool_call>
{"name": "curate", "arguments": {"operations": [{"function": "skill_update", "arguments": {"skill_name": "heat-with-microwave", "new_name": null, "new_content": "---\nname: heat-with-microwave\ndescription: Heat it.\n---\n1. Heat with microwave 1."}}, {"function": "skill_delete", "arguments": {"skill_name": "look-under-lamp"}}]}}
</tool_call>
<tool_call>
{"name": "curate", "arguments": {"operations": []}}
</tool_call>
<tool_response>
Applied 1 operation(s): new_skill_insert clean-then-place ok.
Next task: cool some lettuce and put it in diningtable. Outcome: success. Steps: 12.
</tool_response>
<tool_response>
Applied 2 operation(s): skill_update heat-with-microwave ok; skill_delete look-under-lamp error: no such skill.
</tool_response>
{"type": "function", "function": {"name": "curate", "description": "Apply skill operations to the repository.",
"parameters": {"type": "object", "properties": {"operations": {"type": "array", "description": "A list of
operations.", "items": {"type": "object"}}}, "required": ["operations"]}}}
{"function": "new_skill_insert", "arguments": {"skill_name": "name", "content": "content"}}
{"function": "skill_update", "arguments": {"skill_name": "name", "new_name": "name", "new_content": "content"}}
{"function": "skill_delete", "arguments": {"skill_name": "name"}}
# Tools
You may call one or more functions to assist with the user query.
You are provided with function signatures within <tools></tools> XML tags:
<tools>
</tools>
For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<|im_start|>system
You are a skill curator.<|im_end|>
<|im_start|>user
Task group: pick, clean, heat, cool, look, pick2.<|im_end|>
<|im_start|>assistant
<think>

</think>

<tool_call>
{"name": "curate", "arguments": {"operations": []}}
</tool_call><|im_end|>
<|im_start|>user
<tool_response>
Next task played.
</tool_response><|im_end|>
"""


# ALFWorld's object and receptacle words: a generated block of observation-like lines teaches the merges the
# executor trajectories inside the curator inputs use (shorter sequences = cheaper CPU training).
_OBJECTS = (
    "apple bread book bowl cd cellphone cloth creditcard cup desklamp dishsponge egg fork glassbottle houseplant "
    "kettle keychain knife ladle laptop lettuce mug newspaper pan pen pencil peppershaker pillow plate pot potato "
    "remotecontrol saltshaker soapbar soapbottle spatula spoon spraybottle statue tissuebox toiletpaper tomato towel "
    "vase watch wateringcan winebottle alarmclock baseballbat basketball box candle butterknife"
).split()
_RECEPTACLES = (
    "armchair bathtubbasin bed cabinet coffeemachine coffeetable countertop desk diningtable drawer dresser fridge "
    "garbagecan handtowelholder laundryhamper microwave ottoman safe shelf sidetable sinkbasin sofa stoveburner "
    "toaster toilet toiletpaperhanger towelholder tvstand"
).split()


def _generated_corpus(lines: int = 600, seed: int = 0) -> str:
    import random

    rng = random.Random(seed)
    out = []
    for k in range(lines):
        r, o, o2 = rng.choice(_RECEPTACLES), rng.choice(_OBJECTS), rng.choice(_OBJECTS)
        a, b, i = rng.randint(1, 12), rng.randint(1, 4), k % 30 + 1
        out.append(rng.choice((
            f"Action {i}: go to {r} {a}\nObservation {i}: You arrive at {r} {a}. On the {r} {a}, you see a {o} {b}, "
            f"and a {o2} {rng.randint(1, 3)}.",
            f"Action {i}: open {r} {a}\nObservation {i}: You open the {r} {a}. The {r} {a} is open. In it, you see nothing.",
            f"Action {i}: take {o} {b} from {r} {a}\nObservation {i}: You pick up the {o} {b} from the {r} {a}.",
            f"Action {i}: move {o} {b} to {r} {a}\nObservation {i}: You move the {o} {b} to the {r} {a}.",
            f"Action {i}: close {r} {a}\nObservation {i}: You close the {r} {a}.",
            f"Observation {i}: Nothing happens.",
            f"Your task is to: put a {o} in {r}.",
            f"Your task is to: put a clean {o} in {r}.",
            f"Your task is to: heat some {o} and put it in {r}.",
            f"Your task is to: look at {o} under the desklamp.",
        )))
    return "\n".join(out)


def _corpus() -> list[str]:
    """Everything the tokenizer is trained on (part of the cache key)."""
    from twinrun.core.skills.repository import CURATOR_FUNCTIONS
    from twinrun.core.curation.toolcalls import CURATE_TOOL

    return [_CORPUS, _generated_corpus(), json.dumps(CURATE_TOOL, ensure_ascii=False),
            json.dumps(CURATOR_FUNCTIONS, ensure_ascii=False)]


def _require(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise DependencyMissing(
            f"tiny-qwen3: {module} is not installed (fix: pip install 'twinrun[trl]')"
        ) from None


def trl_qwen3_template() -> str:
    """TRL's own Qwen3 chat template text (exact bytes: TRL matches templates by string equality)."""
    trl = _require("trl")
    path = Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja"
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise DependencyMissing(
            f"tiny-qwen3: {path} cannot be read ({e.strerror}; fix: reinstall trl==1.16.0)"
        ) from None


def _cache_key(args: dict[str, Any], template: str) -> str:
    blob = json.dumps(
        {"builder": _BUILDER_VERSION, "args": args, "corpus": _corpus(), "template": template,
         "special": _SPECIAL_TOKENS, "added": _ADDED_TOKENS},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _is_complete(model_dir: Path) -> bool:
    return (model_dir / ".complete").is_file()


def build_tiny_qwen3(
    out_dir: str | Path,
    *,
    seed: int = 0,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 128,
    vocab: int = 1024,
    max_positions: int = 8192,
    sliding_window: int | None = 384,
) -> Path:
    """Build (or reuse) a random tiny Qwen3 + local tokenizer under ``out_dir`` and return its folder.

    ``out_dir`` is a cache folder the caller names (there is no default); the model lives in
    ``out_dir/tiny-qwen3-<key>/`` and loads with ``AutoModelForCausalLM.from_pretrained`` /
    ``AutoTokenizer.from_pretrained``. The same arguments give the same folder (built once).

    sliding_window: every layer attends to the last ``sliding_window`` tokens only (Qwen3's own sliding-window
    attention; None = full attention). A curation rollout is thousands of tokens long; with a window, what the tiny
    model does at a curator turn depends on the last ``layers * sliding_window`` tokens only, so the warm start can
    train on short windows around each turn (cheap on CPU) and the result holds at any rollout length. 384 (a
    receptive field of 768 tokens) holds a whole smoke-arm curator input chi_i (about 500-600 tokens) before the
    turn: at 192 the task description at its top was out of reach of every turn, so the type a skill is named
    after could only be guessed from the trajectory's last steps (issue 17). sdpa computes the masked full attention either way, so the
    window costs nothing at RL time; only the warm start's windows grow.
    """
    if hidden % heads:
        raise TwinrunError(f"tiny-qwen3: hidden={hidden} is not divisible by heads={heads} (fix: e.g. hidden 64, heads 4)")
    if heads % kv_heads:
        raise TwinrunError(f"tiny-qwen3: heads={heads} is not divisible by kv_heads={kv_heads} (fix: e.g. kv_heads 2)")
    if vocab < 300:
        raise TwinrunError(f"tiny-qwen3: vocab={vocab} must be >= 300 (fix: byte-level BPE needs 256 bytes + merges)")

    template = trl_qwen3_template()
    if sliding_window is not None and sliding_window < 16:
        raise TwinrunError(f"tiny-qwen3: sliding_window={sliding_window} must be >= 16 or None (fix: e.g. 384)")
    args = dict(seed=seed, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads,
                intermediate=intermediate, vocab=vocab, max_positions=max_positions, sliding_window=sliding_window)
    cache = Path(out_dir)
    final = cache / f"{TINY_QWEN3}-{_cache_key(args, template)}"
    if _is_complete(final):
        return final

    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=cache))
    try:
        _write_model(tmp, template=template, **args)
        (tmp / ".complete").write_text(json.dumps(args, sort_keys=True) + "\n")
        try:
            os.replace(tmp, final)  # atomic; fails if another builder won the race (non-empty target)
        except OSError:
            if not _is_complete(final):
                # a leftover incomplete folder from a crash: replace it
                shutil.rmtree(final, ignore_errors=True)
                os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def _train_tokenizer(vocab: int, template: str) -> Any:
    tokenizers = _require("tokenizers")
    transformers = _require("transformers")
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=list(_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # the corpus (ALFWorld text, skills, the curate tool schema) plus the chat template itself
    tok.train_from_iterator([*_corpus(), template], trainer=trainer)
    tok.add_tokens([tokenizers.AddedToken(t, special=False, normalized=False) for t in _ADDED_TOKENS])

    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        model_max_length=131072,
        padding_side="left",
    )
    fast.chat_template = template
    return fast


def _write_model(
    path: Path, *, template: str, seed: int, hidden: int, layers: int, heads: int, kv_heads: int,
    intermediate: int, vocab: int, max_positions: int, sliding_window: int | None,
) -> None:
    torch = _require("torch")
    transformers = _require("transformers")

    tokenizer = _train_tokenizer(vocab, template)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = transformers.Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden // heads,
        max_position_embeddings=max_positions,
        use_sliding_window=sliding_window is not None,
        sliding_window=sliding_window,
        max_window_layers=0,  # every layer slides
        tie_word_embeddings=True,
        bos_token_id=pad,
        eos_token_id=eos,
        pad_token_id=pad,
        torch_dtype="float32",
    )
    # seed only a private generator's worth of global state: restore the caller's RNG afterwards
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.Qwen3ForCausalLM(config)
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=pad, eos_token_id=[eos, pad], pad_token_id=pad, do_sample=True
    )
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)


def local_or_hub(name: str) -> str:
    """A model name that is a local folder (relative to this process's working directory, as ``from_pretrained``
    reads it here) becomes absolute: verl's trainer and Ray workers load it from other working directories, where a
    relative folder would be taken for a hub id. Anything else (a hub id) is returned unchanged."""
    p = Path(name).expanduser()
    return str(p.resolve()) if p.is_dir() else name


def resolve_model(name: str, cache_dir: str | Path | None) -> str:
    """Map a spec's model name to something ``from_pretrained`` loads: ``tiny-qwen3`` -> the built folder
    (needs ``cache_dir``), a local folder -> its absolute path, a hub id unchanged."""
    if name != TINY_QWEN3:
        return local_or_hub(name)
    if cache_dir is None:
        raise TwinrunError(
            f"curator.model: {TINY_QWEN3!r} is built locally and needs a cache folder (fix: pass --cache DIR or set TWINRUN_CACHE)"
        )
    return str(build_tiny_qwen3(cache_dir))
