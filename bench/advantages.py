"""Benchmark: twinrun's vectorised GiGPO vs a straightforward per-row dict implementation, same process, same data.

Workload: 32 episode groups x 8 trajectories x 10 steps = 2,560 step rows (256 trajectories), ALFWorld-like text
anchors with realistic sharing: all rollouts of a group start from the same observation, then move between a
handful of locations, so states recur across trajectories and within one; 30% of observations carry a small
perturbation (an object number), which exact matching keeps apart and similarity matching (ratio >= 0.95) merges.

Prints CPU microseconds per call (median of repeats) and the ratio baseline / twinrun, for exact and similarity
matching (plus exact matching on 16-hex hashes of the text, which is what twinrun's curator uses as anchors), and
checks that both implementations put the same rows in the same step groups and return the same advantages.
The baseline's similarity matching is verl-agent's greedy loop (stdlib difflib, every row against each cluster's
first member); twinrun's (core.advantages._similarity_clusters) makes the same decisions with fewer and faster
ratio calls. Run:

    .venv/bin/python bench/advantages.py [--repeats N]
"""

from __future__ import annotations

import argparse
import hashlib
import math
import statistics
import time
from collections import defaultdict
from difflib import SequenceMatcher

import numpy as np

from twinrun.core.advantages import anchor_groups, gigpo

GROUPS, TRAJ_PER_GROUP, STEPS = 32, 8, 10
LOCATIONS = [
    "countertop 1", "cabinet 2", "fridge 1", "microwave 1", "sinkbasin 1", "drawer 3", "shelf 1", "diningtable 1",
]
OBJECTS = ["apple", "bread", "butterknife", "egg", "knife", "lettuce", "mug", "plate", "potato", "spatula"]


def _observation(rng: np.random.Generator, group: int, loc: int, perturb: bool) -> str:
    # deterministic per (group, location) so states recur; a perturbation changes one object number
    local = np.random.default_rng(group * 100 + loc)
    objs = local.choice(OBJECTS, size=5, replace=False)
    nums = local.integers(1, 4, size=5)
    if perturb:
        nums = nums.copy()
        nums[rng.integers(5)] += 1
    items = ", ".join(f"a {o} {n}" for o, n in zip(objs, nums))
    return (
        f"You arrive at {LOCATIONS[loc]}. On the {LOCATIONS[loc]}, you see {items}. "
        f"Your task is to: put a clean {OBJECTS[group % len(OBJECTS)]} in {LOCATIONS[(group + 3) % len(LOCATIONS)]}."
    )


def make_workload(seed: int = 0) -> dict[str, list]:
    rng = np.random.default_rng(seed)
    g, t, s, r, a, v = [], [], [], [], [], []
    for gi in range(GROUPS):
        start = _observation(rng, gi, 0, perturb=False)
        for ti in range(TRAJ_PER_GROUP):
            loc = 0
            success = rng.random() < 0.4
            for si in range(STEPS):
                if si > 0:  # mostly go to one of three popular locations, sometimes elsewhere
                    loc = int(rng.choice([1, 2, 3]) if rng.random() < 0.7 else rng.integers(len(LOCATIONS)))
                obs = start if si == 0 else _observation(rng, gi, loc, perturb=rng.random() < 0.3)
                g.append(f"g{gi}")
                t.append(f"g{gi}t{ti}")
                s.append(si)
                r.append(10.0 if (success and si == STEPS - 1) else 0.0)
                a.append(obs)
                v.append(bool(rng.random() > 0.05))
    perm = rng.permutation(len(g))  # rows arrive shuffled (as after verl's balance_batch)
    return {k: [col[i] for i in perm] for k, col in (("g", g), ("t", t), ("s", s), ("r", r), ("a", a), ("v", v))}


# ------------------------------------------------------------------------------------------------------------
# Baseline: the straightforward per-row dict implementation (verl-agent's algorithm, written plainly)


def gigpo_dict(r, g, t, s, anchors, valid, *, gamma, w, mode, anchor_match, thresh, penalty, eps=1e-6):
    n = len(r)
    by_traj = defaultdict(list)
    for i in range(n):
        by_traj[t[i]].append(i)
    ret = [0.0] * n
    R = {}
    for tr, idx in by_traj.items():
        idx.sort(key=lambda i: s[i])
        run = 0.0
        for i in reversed(idx):
            run = r[i] + gamma * run
            ret[i] = run
        R[tr] = sum(r[i] for i in idx)
    score = [R[t[i]] - (0.0 if valid[i] else penalty) for i in range(n)]
    ret = [ret[i] - (0.0 if valid[i] else penalty) for i in range(n)]

    def normalise(values, keys, singleton_zero):
        members = defaultdict(list)
        for i in range(n):
            members[keys[i]].append(values[i])
        stats = {}
        for k, m in members.items():
            if len(m) == 1:
                stats[k] = (m[0], 1.0) if singleton_zero else (0.0, 1.0)
            else:
                mu = sum(m) / len(m)
                stats[k] = (mu, math.sqrt(sum((x - mu) ** 2 for x in m) / (len(m) - 1)))
        out = []
        for i in range(n):
            mu, sd = stats[keys[i]]
            out.append((values[i] - mu) / (sd + eps) if mode == "mean_std_norm" else values[i] - mu)
        return out

    a_e = normalise(score, g, singleton_zero=False)  # rows pool, singleton raw (verl-agent)
    if anchor_match == "exact":
        keys = [(g[i], anchors[i]) for i in range(n)]
    else:
        keys = similarity_keys(g, anchors, thresh)
    a_s = normalise(ret, keys, singleton_zero=True)
    return np.array([a_e[i] + w * a_s[i] for i in range(n)])


def similarity_keys(g, anchors, thresh):
    """verl-agent's similarity step groups (build_step_group): each row joins the first cluster of its group whose
    first member has difflib ratio >= thresh, else opens one."""
    keys = [None] * len(g)
    clusters = defaultdict(list)  # group -> [(rep, id)]
    for i in range(len(g)):
        for rep, cid in clusters[g[i]]:
            if SequenceMatcher(None, anchors[i], rep).ratio() >= thresh:
                keys[i] = cid
                break
        else:
            cid = (g[i], len(clusters[g[i]]))
            clusters[g[i]].append((anchors[i], cid))
            keys[i] = cid
    return keys


def same_partition(codes, keys) -> bool:
    """Whether two labelings put the same rows together (labels renumbered by first appearance)."""
    def canon(labels):
        seen = {}
        return [seen.setdefault(x, len(seen)) for x in labels]

    return canon([int(c) for c in codes]) == canon(keys)


# ------------------------------------------------------------------------------------------------------------


def _time(fn, repeats: int) -> float:
    """Median CPU time of this process per call, in microseconds (the caller already ran fn once, as the
    correctness check). CPU time, not wall time: both implementations are single-threaded, and the machine this
    runs on is shared, so wall time mostly measures the neighbours."""
    samples = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        samples.append(time.process_time() - t0)
    return statistics.median(samples) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=21)
    args = ap.parse_args()
    w = make_workload()
    n = len(w["r"])
    invalid = [not x for x in w["v"]]
    knobs = dict(gamma=0.95, mode="mean_std_norm")
    print(f"GiGPO on {n} rows ({GROUPS * TRAJ_PER_GROUP} trajectories x {STEPS} steps, {GROUPS} groups)")
    print(f"{'matching':<12}{'twinrun us/call':>18}{'dict baseline us/call':>24}{'ratio':>9}   step groups (mean size)")
    print("(CPU time per call, median)")
    # twinrun's curator anchors are short hashes of the curator input, not the text itself
    hashed = [hashlib.sha256(x.encode()).hexdigest()[:16] for x in w["a"]]
    for label, match, anchors in (("exact", "exact", w["a"]), ("exact/hash", "exact", hashed),
                                  ("similarity", "similarity", w["a"])):
        ours = lambda: gigpo(  # noqa: E731
            w["r"], w["g"], w["t"], w["s"], anchors, step_weight=1.0, anchor_match=match, similarity=0.95,
            pool="rows", invalid=invalid, invalid_penalty=0.1, **knobs,
        )
        base = lambda: gigpo_dict(  # noqa: E731
            w["r"], w["g"], w["t"], w["s"], anchors, w["v"], w=1.0, anchor_match=match, thresh=0.95, penalty=0.1,
            gamma=knobs["gamma"], mode=knobs["mode"],
        )
        a_ours, a_base = ours()[0], base()
        np.testing.assert_allclose(a_ours, a_base, atol=1e-9, rtol=1e-9)
        # similarity: the baseline takes seconds per call, so fewer repeats of it
        t_ours = _time(ours, args.repeats if match == "exact" else max(3, args.repeats // 3))
        t_base = _time(base, args.repeats if match == "exact" else 2)
        codes = anchor_groups(anchors, w["g"], anchor_match=match, similarity=0.95)
        ref = ([(gi, a) for gi, a in zip(w["g"], anchors)] if match == "exact"
               else similarity_keys(w["g"], anchors, 0.95))
        if not same_partition(codes, ref):
            raise SystemExit(f"{label}: twinrun's step groups differ from the reference's")
        print(
            f"{label:<12}{t_ours:>18.0f}{t_base:>24.0f}{t_base / t_ours:>8.1f}x   "
            f"{len(np.unique(codes))} ({n / len(np.unique(codes)):.2f})"
        )
    print("(same step groups row for row and same advantages (to 1e-9) from both implementations)")


if __name__ == "__main__":
    main()
