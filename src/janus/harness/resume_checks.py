"""What a resumed run may change, checked before anything is written (``--resume``, ``resume=``).

Before the configuration is validated, :func:`check_resume_request` refuses a flag that contradicts
``--resume``, a run that keeps no checkpoint (:func:`check_resumable`) and a change of anything the
checkpoint fixes (:func:`check_changes`, against :data:`MAY_CHANGE_ON_RESUME`). Once the run is
planned, the command checks the change again and refuses a budget the run has already reached
(:func:`check_budget`) or a run whose checkpoint folder is gone (:func:`check_checkpoint_kept`).
Every refusal names the flag and says that the folder was not changed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from janus.config import RunConfig, WorkloadConfig, from_dict, read_yaml
from janus.errors import RunFolderError
from janus.harness.run_folder import check_flags

if TYPE_CHECKING:
    from janus.config.request import RunRequest

# Configuration entries a resumed run may change (config path -> the flag that sets it): budgets,
# timing of checkpoints and liveness checks, where the components run. Everything else is fixed
# by the checkpoint (env, algorithm, network, buffer, hyperparameters, data path, seed).
MAY_CHANGE_ON_RESUME: dict[str, str] = {
    "name": "--name",
    "workload.total_env_steps": "--total_env_steps",
    "runtime.checkpoint_interval_s": "--checkpoint_interval_s",
    "runtime.results_interval_s": "--results_interval_s",  # how often the live results are rewritten
    "runtime.stall_timeout_s": "--stall_timeout_s",
    "runtime.ping_interval_s": "--ping_interval_s",
    "runtime.pong_timeout_s": "--pong_timeout_s",
    "runtime.backend": "--backend",
    "runtime.address": "--address",
    "runtime.workers_per_node": "--workers_per_node",
    "runtime.max_calls_in_flight": "--max_calls_in_flight",
    "workload.vector_env": "--vector_env",  # where the envs step, not what they do
    "runtime.eval_interval_steps": "--eval_interval_steps",
    "runtime.eval_episodes": "--eval_episodes",
    "runtime.target_return": "--target_return",  # where to stop, not how it trains (a reached one is refused)
    "runtime.allow_oversubscribe": "--allow_oversubscribe",  # the machine's bounds, not what the run does
}
NOT_COMPARED = {"runtime.checkpoint_dir", "runtime.resume", "runtime.best_dir",  # set per invocation by `janus train`
                "workload.preset"}  # the choice of values compared one by one (a run before presets has none)


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, path + "."))
        else:
            out[path] = value
    return out


def flag_of(path: str) -> str:
    """The command-line flag (or config entry) behind configuration path ``path``."""
    if path in MAY_CHANGE_ON_RESUME:
        return MAY_CHANGE_ON_RESUME[path]
    section, _, key = path.rpartition(".")
    if section == "algorithm":  # every hyperparameter has its flag (janus.cli), the network two
        return {"hidden": "--net_arch/--hidden_size/--num_layers", "critic_hidden": "--critic_net_arch"}.get(key, f"--{key}")
    if path == "workload.algo":
        return "--algo"
    if path == "workload.num_actors":
        return "--num_actors/--num_workers"
    return f"--{key}"


def check_resume_request(args: RunRequest, requested: RunConfig) -> None:
    """``janus train --resume``, before the config is validated or anything written: flags that
    contradict ``--resume`` and changes of what the checkpoint fixes are errors naming the flag."""
    check_flags(args)
    folder = Path(str(args.resume))
    stored = stored_config(folder)
    check_resumable(folder, stored)
    check_changes(folder, stored, requested)


def _with_defaults(cfg: RunConfig, keys: set[str]) -> dict[str, Any]:
    """``cfg`` as a dict whose ``algorithm`` section also holds ``keys`` left at their default (a
    config.yaml lists only the hyperparameters that were set)."""
    from janus.algorithms.base import algorithm

    out = cfg.to_dict()
    defaults = algorithm(cfg.workload.algo).defaults()
    out["algorithm"] = {**{k: v for k, v in defaults.items() if k in keys}, **cfg.algorithm}
    return json.loads(json.dumps(out))


def check_changes(folder: Path, stored: RunConfig, requested: RunConfig) -> None:
    """Refuse a resume of the run in ``folder`` that changes what its checkpoint fixes (restating
    a value it already has is no change)."""
    keys = set(stored.algorithm) | set(requested.algorithm)
    old = _flat(_with_defaults(stored, keys))
    new = _flat(_with_defaults(requested, keys))
    changed = sorted(p for p in set(old) | set(new) if p not in NOT_COMPARED and old.get(p) != new.get(p))
    fixed = [p for p in changed if p not in MAY_CHANGE_ON_RESUME]
    if fixed:
        what = "; ".join(f"{flag_of(p)}: {old.get(p)!r:.60} in the run, {new.get(p)!r:.60} asked" for p in fixed)
        allowed = ", ".join(sorted(set(MAY_CHANGE_ON_RESUME.values())) + ["--tensorboard", "--wandb"])
        raise RunFolderError(
            f"--resume {str(folder)!r} cannot change {', '.join(flag_of(p) for p in fixed)} ({what}): the run's "
            f"checkpoint fixes it. A resumed run may change only {allowed}; start a new run with --out to train "
            f"with other settings. {folder} was not changed")


def results_missing(folder: Path, state: dict[str, Any]) -> str | None:
    """Why the results of the run in ``folder`` are not those of its commit ``state`` (no
    results.json, one that cannot be read, not ``finished``, or of another update count); None
    when they are."""
    path = folder / "results.json"
    if not path.is_file():
        return "there is no results.json"
    try:
        last = json.loads(path.read_text())["runs"][-1]
        status, counts = last["status"], last["counts"]
        updates = int(counts.get("run_updates", counts["updates"]))
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        return f"its results.json cannot be read ({type(exc).__name__})"
    if status != "finished":
        return f"its results.json says {status!r}"
    if updates != int(state.get("trained", -1)):
        return f"its results.json records {updates:,} updates, its final checkpoint {int(state.get('trained', 0)):,}"
    return None


def check_budget(folder: Path, requested: RunConfig, state: dict[str, Any], total_updates: int, budget_flag: str) -> None:
    """Refuse a resume whose budget (``total_updates`` learner updates) the run in ``folder``,
    at the commit ``state``, has already reached."""
    trained, steps = int(state.get("trained", 0)), int(state.get("env_steps", 0))
    if state and trained >= total_updates:
        raise RunFolderError(
            f"--resume {str(folder)!r}: the run is already at {steps:,} env steps ({trained:,} updates), which "
            f"reaches its budget {budget_flag} {_budget_value(requested, budget_flag):,} ({total_updates:,} updates); "
            f"raise {budget_flag} past {steps:,} to train further. {folder} was not changed "
            "(results.json and results.csv are as they were)")


def check_target(folder: Path, requested: RunConfig, state: dict[str, Any]) -> None:
    """Refuse a resume whose ``target_return`` an evaluation of the run in ``folder`` (at the commit
    ``state``) has already reached: it would stop at once."""
    from janus.runtime.summary import solved_in

    target = requested.runtime.target_return
    reached = solved_in(list(state.get("evaluations", [])), target) if state else None
    if reached is not None:
        raise RunFolderError(
            f"--resume {str(folder)!r}: the run already reached its target: the evaluation at {reached['env_steps']:,} env "
            f"steps had mean return {reached['mean_return']:.1f} >= --target_return {target:g}; raise --target_return "
            f"(or leave it out) to train further. {folder} was not changed")


def check_resumable(folder: Path, stored: RunConfig) -> None:
    """Refuse to resume the run in ``folder`` (its config ``stored``) when its algorithm checkpoints
    nothing (the synthetic workload): it would run again from scratch and replace the run's results
    under its name."""
    from janus.algorithms.base import algorithm

    algo = algorithm(stored.workload.algo)
    if algo.has_policy:
        return
    raise RunFolderError(
        f"--resume {str(folder)!r}: --algo {algo.name} keeps no checkpoint (it measures throughput: there is no "
        f"policy or replay to continue), so its run cannot be resumed; resuming would run it again from scratch and "
        f"replace its results. Start a new run with --out. {folder} was not changed")


def check_checkpoint_kept(folder: Path, checkpoint_dir: str, state: dict[str, Any]) -> None:
    """Refuse to resume a run that wrote results but whose checkpoint folder is gone or empty.

    Starting from scratch would replace the run's results with those of a new run under the old
    name. A run killed before its first commit (its periodic results.json may be there) still has
    the checkpoint folder it made at start, and does start from scratch."""
    ckpt = Path(checkpoint_dir)
    if state or not (folder / "results.json").is_file() or (ckpt.is_dir() and any(ckpt.iterdir())):
        return
    try:
        runs = json.loads((folder / "results.json").read_text()).get("runs") or [{}]
        steps = f"{int(runs[-1]['counts']['env_steps']):,} env steps"
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        steps = "a finished run"
    raise RunFolderError(
        f"--resume {str(folder)!r}: results.json records {steps}, but its checkpoint folder {checkpoint_dir} is "
        f"{'empty' if ckpt.is_dir() else 'gone'} (deleted or moved?), so the run cannot continue; resuming would start from scratch and "
        f"replace its results. Put the checkpoint folder back, or start a new run with --out. {folder} was not "
        "changed")


def _budget_value(cfg: RunConfig, flag: str) -> int:
    return int(getattr(cfg.workload, flag.lstrip("-")))


def stored_config(folder: Path) -> RunConfig:
    """The configuration ``janus train`` saved in ``folder/config.yaml`` (on its algorithm's preset,
    as :func:`janus.config.build.base_config` reads it)."""
    from janus.algorithms.base import algorithm

    raw = read_yaml(folder / "config.yaml")
    name = (raw.get("workload") or {}).get("algo", WorkloadConfig().algo)
    preset = algorithm(name).preset if isinstance(name, str) else {}
    base = from_dict(preset) if preset else RunConfig()
    return from_dict(raw, base=base) if raw else base
