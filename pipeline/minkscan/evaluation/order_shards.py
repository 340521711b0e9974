"""The order test's orderings (Oren et al., ICLR 2024): how examples are cut into shards,
the seeded shuffles of each, and -- before a forward pass is spent -- whether settings can
reach the test level at all.

Shards are contiguous, the first ``n % shards`` one example longer, as the authors'
``compute_sharded_comparison_test.py`` cuts them. A shard's shuffles are distinct orders
other than the published one, drawn without replacement (the authors' ``random.sample`` may
repeat the published order): so under the null the published order's rank among them is
uniform, and the exact permutation p-value (`minkscan.evaluation.order_test`) can be no
smaller than (1 / (P + 1)) ^ shards. Settings whose floor is not below alpha, with more
shuffles than a shard has orders (or than `MAX_PERMUTATIONS`), or with too few examples are
refused naming settings that can answer (`plan_problem`).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

# Each shard needs two examples, or it has a single ordering and nothing to compare.
MIN_EXAMPLES_PER_SHARD = 2
DEFAULT_SHARDS = 50
DEFAULT_PERMUTATIONS = 50  # at most: fewer where the smallest shard has fewer other orders
# Shards this small or smaller have their shuffles drawn from all their orders (at most
# 7! = 5,040); larger ones by rejecting repeats among random permutations.
ENUMERATED_SIZE = 7
# Shuffles per shard at most: each is a forward pass and a row of the orderings table, built
# in memory before scoring, and beyond it the exact p-value's floor, (1/10,001)^shards, is far
# below any test level already.
MAX_PERMUTATIONS = 10_000


def shard_sizes(n_examples: int, shards: int) -> list[int]:
    """Examples per shard, as the authors cut them: the first ``n % shards`` shards one
    longer."""
    base, extra = divmod(n_examples, shards)
    return [base + (1 if i < extra else 0) for i in range(shards)]


def shard_bounds(n_examples: int, shards: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) of each shard (`shard_sizes`)."""
    edges = np.cumsum([0, *shard_sizes(n_examples, shards)])
    return [(int(a), int(b)) for a, b in itertools.pairwise(edges)]


def other_orders(size: int) -> int:
    """How many orders of a shard of ``size`` examples differ from the published one."""
    return math.factorial(size) - 1


def exact_floor(shards: int, permutations: int) -> float:
    """The smallest exact permutation p-value a run can reach: every shard's published
    order above all its shuffles."""
    return float((permutations + 1) ** -shards)


def _reaches(shards: int, permutations: int, alpha: float) -> bool:
    return (permutations + 1) ** shards * alpha > 1


def _fits(n_examples: int, shards: int, permutations: int) -> bool:
    """Whether ``shards`` shards of these examples each hold two examples and have
    ``permutations`` orders besides the published one."""
    if shards < 2 or n_examples < MIN_EXAMPLES_PER_SHARD * shards:
        return False
    return other_orders(min(shard_sizes(n_examples, shards))) >= permutations


def default_permutations(n_examples: int, shards: int, most: int) -> int:
    """Shuffles per shard when none are asked for: ``most``, or as many orders as the
    smallest shard has besides the published one, if fewer (at least 1)."""
    if shards < 1 or n_examples < shards:
        return most
    return max(1, min(most, other_orders(min(shard_sizes(n_examples, shards)))))


def plan_problem(n_examples: int, shards: int, permutations: int, alpha: float) -> str | None:
    """Why these settings cannot answer at level ``alpha`` (None: they can), naming
    settings that can: too few examples, shards or shuffles, or more shuffles than a shard
    has orders, or more than `MAX_PERMUTATIONS`."""
    if n_examples < 2 * MIN_EXAMPLES_PER_SHARD:
        return (f"{n_examples} examples are too few for the order test: it needs 2 shards of "
                f"{MIN_EXAMPLES_PER_SHARD} examples")  # fmt: skip
    most_shards = n_examples // MIN_EXAMPLES_PER_SHARD
    if shards < 2:
        return (f"the order test needs at least 2 shards (a t-test across them), got {shards}: "
                f"use --shards between 2 and {most_shards}")  # fmt: skip
    if shards > most_shards:
        return (f"{n_examples} examples cannot fill {shards} shards of at least "
                f"{MIN_EXAMPLES_PER_SHARD} examples: use --shards between 2 and "
                f"{most_shards}")  # fmt: skip
    if permutations > MAX_PERMUTATIONS:
        return (f"--permutations {permutations:,} is more than the {MAX_PERMUTATIONS:,} shuffles "
                "per shard an order test takes (each is a forward pass and a row held in memory; "
                f"{MAX_PERMUTATIONS:,} already puts the p-value's floor at (1/"
                f"{MAX_PERMUTATIONS + 1:,})^shards): use --permutations {MAX_PERMUTATIONS:,} "
                "or fewer")  # fmt: skip
    size = min(shard_sizes(n_examples, shards))
    if permutations > other_orders(size):
        others = f"{other_orders(size)} order{'s' if other_orders(size) > 1 else ''}"
        return (f"shards of {size} examples have only {others} besides the "
                f"published one, fewer than --permutations {permutations}: use --permutations "
                f"{other_orders(size)} or fewer, or fewer shards")  # fmt: skip
    if _reaches(shards, permutations, alpha):
        return None
    options = []
    more = next((p for p in range(permutations + 1, MAX_PERMUTATIONS + 1)
                 if _reaches(shards, p, alpha)), None)  # fmt: skip
    if more is not None and _fits(n_examples, shards, more):
        options.append(f"--permutations {more} (p >= {exact_floor(shards, more):.2g})")
    wider = next((s for s in range(shards + 1, most_shards + 1)
                  if _reaches(s, permutations, alpha)), None)  # fmt: skip
    if wider is not None and _fits(n_examples, wider, permutations):
        options.append(f"--shards {wider} (p >= {exact_floor(wider, permutations):.2g})")
    advice = (
        f"use {' or '.join(options)}" if options
        else f"{n_examples} examples are too few to reach it with these shuffles per shard"
    )  # fmt: skip
    return (f"--shards {shards} --permutations {permutations} cannot reach p < {alpha:g}: "
            f"its exact p-value is at least (1/{permutations + 1})^{shards} = "
            f"{exact_floor(shards, permutations):.2g}; {advice}")  # fmt: skip


def shuffled_orders(size: int, permutations: int, seed: int, shard: int) -> list[list[int]]:
    """``permutations`` seeded orders of a shard's ``size`` examples, distinct from each
    other and from the published order (drawn without replacement; its own stream per
    shard, so a shard's shuffles do not depend on the others)."""
    if permutations > other_orders(size):
        raise ValueError(f"a shard of {size} examples has only {other_orders(size)} other "
                         f"orders, fewer than {permutations}")  # fmt: skip
    rng = np.random.default_rng([seed, shard])
    if size <= ENUMERATED_SIZE:
        orders = list(itertools.permutations(range(size)))[1:]  # the first is the published
        return [list(orders[i]) for i in rng.choice(len(orders), permutations, replace=False)]
    seen, shuffles = {tuple(range(size))}, []
    while len(shuffles) < permutations:
        order = tuple(rng.permutation(size).tolist())
        if order not in seen:
            seen.add(order)
            shuffles.append(list(order))
    return shuffles
