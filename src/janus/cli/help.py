"""``janus train --algo X --help``: the flags X reads, with X's defaults, then the others by name.

``janus train --help`` without ``--algo`` stays the whole reference (every flag, every
algorithm's default); with ``--algo`` a user sees what that algorithm reads first, in a page.
"""

from __future__ import annotations

import argparse
import copy
import re
from collections.abc import Sequence

from janus.config.flags import (
    JANUS_FLAGS,
    NETWORK_FLAGS,
    RUNTIME_FLAGS,
    WORKLOAD_FLAGS,
    hyperparameter_docs,
    hyperparameters,
    reads,
)

RUN_FLAGS = ("config", "out", "quick", "force", "name", "seed", "seeds", "resume", "tensorboard", "wandb",
             "wandb_project")
"""Flags of the run itself, whatever the algorithm."""
ALGORITHM_KNOBS = ("batch_size", "buffer_capacity", "num_minibatches")
"""Data-path knobs that are hyperparameters of the algorithms that read them."""
EVALUATION_FLAGS = ("backend", "eval_interval_steps", "eval_episodes", "target_return", "checkpoint_interval_s")
"""Runtime flags an RL user sets: where the run acts, how often it evaluates and checkpoints."""


def algo_asked(argv: Sequence[str]) -> str | None:
    """The algorithm of ``janus train --algo X --help`` (its registry name), else None (a full help,
    an unknown name: the parser answers as ever)."""
    from janus.algorithms.base import algorithm, canonical_name
    from janus.errors import ConfigError

    args = list(argv)
    if not args or args[0] != "train" or not {"-h", "--help"} & set(args):
        return None
    name = next((a.partition("=")[2] for a in args if a.startswith("--algo=")), None)
    if name is None and "--algo" in args and args.index("--algo") + 1 < len(args):
        name = args[args.index("--algo") + 1]
    if not name:
        return None
    try:
        algorithm(name)
    except ConfigError:
        return None
    return str(canonical_name(name))


def for_algorithm(text: str | None, algo: str) -> str | None:
    """A flag's help with ``algo``'s default only, and without the "(dqn, sac only)" note."""
    if not text or text == argparse.SUPPRESS:
        return text

    def own(match: re.Match[str]) -> str:
        parts = match.group(1).split("; ")
        if len(parts) == 1:
            return match.group(0)
        mine = next((p[: -len(f" for {algo}")] for p in parts if p.endswith(f" for {algo}")), None)
        return f"[default {mine}]" if mine is not None else match.group(0)

    text = re.sub(r"\[default ([^\]]*)\]", own, text)
    return re.sub(r" \([^()]* only\)$", "", text)


def algo_help(train: argparse.ArgumentParser, algo: str) -> str:
    """The help page of ``janus train --algo algo``: its flags first, grouped, then the others by name."""
    from janus.algorithms.base import algorithm

    actions = {a.option_strings[0][2:]: a for a in train._actions if a.option_strings and a.dest != "help"}
    hyper = [f for f in (*hyperparameters(), *NETWORK_FLAGS, *ALGORITHM_KNOBS) if f in actions and reads(algo, f)]
    workload = [f for f in WORKLOAD_FLAGS if f != "algo" and f in actions and reads(algo, f)]
    runtime = [f for f in EVALUATION_FLAGS if f in actions and reads(algo, f)]
    groups = [(f"--algo {algo}: its hyperparameters (the algorithm: section and the knobs it reads)", hyper),
              ("the environment and the budget", workload), ("backend, evaluation and checkpoints", runtime),
              ("the run", [f for f in RUN_FLAGS if f in actions])]
    shown = {f for _, flags in groups for f in flags}
    others = [f for f in (*JANUS_FLAGS, *RUNTIME_FLAGS) if f not in shown and f in actions and reads(algo, f)]
    page = argparse.ArgumentParser(
        prog="janus train", usage=f"janus train --algo {algo} [FLAGS]", add_help=False,
        description=f"The flags --algo {algo} reads, with its defaults (a --config file's values replace them; flags "
                    f"replace both). Stable-Baselines3's names are accepted too (learning_rate, n_envs, n_steps, ...: "
                    f"the README's SB3 -> janus table).",
        epilog=f"Other flags --algo {algo} reads (the data-path knobs and the runtime, the same for every algorithm): "
               + ", ".join(f"--{f}" for f in others) + ". janus train --help lists every flag with its help.")
    own, shared = algorithm(algo).flags(), hyperparameter_docs()
    for title, flags in groups:
        group = page.add_argument_group(title)
        for flag in flags:
            action = copy.copy(actions[flag])
            action.help = for_algorithm(action.help, algo)
            doc = shared.get(flag, "").replace("%", "%%")
            if flag in own and own[flag].doc and doc and action.help and action.help.startswith(doc):
                action.help = own[flag].doc.replace("%", "%%") + action.help[len(doc):]  # its own words
            group._group_actions.append(action)
    return page.format_help()
