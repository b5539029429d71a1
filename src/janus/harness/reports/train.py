"""What ``janus train`` and :func:`janus.train` print as a run ends: RL first.

An RL user looks for the return, the evaluations, env-steps/s and the time, so those lead; the
data-path table (samples/s, stage times, speedups) and the runtime's message counts are
``--verbose`` (``verbose=True``) only, and always in results.json. Also what a run records of its
end (:func:`ended`) and the budget it runs (:func:`whole_budget`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from janus.config import RunConfig
from janus.harness.reports.curves import CURVE_WINDOW, moving_mean
from janus.result import RunResult, env_steps_rate


def acts_in_env(run: dict[str, Any]) -> bool:
    """Whether ``run`` acted in an environment (an RL run), not in the synthetic workload."""
    return run.get("learning_curve") is not None or "env" in ((run.get("config") or {}).get("workload") or {})


def budget_reason(run: dict[str, Any]) -> str:
    """The ``stop_reason`` of a run that ran to its end: the budget it reached, in env steps for a
    run that acts in an environment, else in learner updates."""
    counts = run.get("counts") or {}
    workload = (run.get("config") or {}).get("workload") or {}
    if acts_in_env(run):
        steps = int(counts.get("run_env_steps", counts.get("env_steps", 0)))
        asked = int(workload.get("total_env_steps") or 0)
        round_ = int(workload.get("num_actors", 1)) * int(workload.get("envs_per_actor", 1)) * int(workload.get("rollout_length", 1))
        budget = -(-asked // round_) * round_ if round_ > 0 else asked  # in whole rounds, as the run acts it
        if asked and steps > budget:  # acted past its rounds (workers running ahead of the learner)
            return (f"budget reached: {budget:,} env steps trained on; the workers acted {steps:,}, "
                    f"{steps - budget:,} more while the learner finished (they ran ahead of it)")
        if steps == budget != asked:
            return f"budget reached: {steps:,} env steps (total_env_steps {asked:,} in whole rounds of {round_:,})"
        return f"budget reached: {steps:,} env steps"
    return f"budget reached: {int(counts.get('run_updates', counts.get('updates', 0))):,} updates"


def end_reason(run: dict[str, Any]) -> str:
    """The ``stop_reason`` of a run that ended by itself: the target return it reached, else its budget."""
    if run.get("solved"):
        return (f"target return reached: an evaluation's mean return >= {float(run['target_return']):g} at "
                f"{int(run['solved_at_env_steps']):,} env steps")
    return budget_reason(run)


def solved_line(run: dict[str, Any]) -> str | None:
    """``solved: mean return 480.1 >= 475 at 20,000 env steps, 14.2 s after the command (9.8 s of training)``,
    or why not; None for a run with no ``target_return``."""
    target = run.get("target_return")
    if target is None:
        return None
    evaluations = [e for e in run.get("evaluations") or [] if e.get("mean_return") is not None]
    if not run.get("solved"):
        best = max((float(e["mean_return"]) for e in evaluations), default=None)
        said = f"the best evaluation {best:.1f}" if best is not None else "no evaluation finished"
        return f"not solved: no evaluation reached the target return {float(target):g} ({said})"
    steps = int(run["solved_at_env_steps"])
    reached = next((float(e["mean_return"]) for e in evaluations if int(e["env_steps"]) == steps), float(target))
    since = (f", {float(run['solved_at_s']):.1f} s after the command" if run.get("solved_at_s") is not None else "")
    return (f"solved: mean return {reached:.1f} >= {float(target):g} at {steps:,} env steps{since} "
            f"({float(run['solved_at_train_s']):.1f} s of training)")


def _evaluation(e: dict[str, Any]) -> str:
    return (f"{float(e['mean_return']):.1f} ± {float(e.get('std_return', 0.0)):.1f} "
            f"at {int(e['env_steps']):,} env steps")


def return_line(run: dict[str, Any]) -> str:
    """``return 487.3 (mean of the last 20 of 212 episodes; the best such mean 500.0)``."""
    returns = list((run.get("learning_curve") or {}).get("return") or [])
    if run.get("final_mean_return") is None or not returns:
        return "return: no episode finished"
    window = min(CURVE_WINDOW, len(returns))
    best = max(moving_mean(returns, CURVE_WINDOW))
    return (f"return {float(run['final_mean_return']):.1f} (mean of the last {window} of {len(returns):,} "
            f"episodes; the best such mean {best:.1f})")


def evaluations_line(run: dict[str, Any]) -> str | None:
    """``evaluations: 5; the last 500.0 ± 0.0 at 50,000 env steps; the best ...`` (None: none ran)."""
    evaluations = [e for e in run.get("evaluations") or [] if e.get("mean_return") is not None]
    if not evaluations:
        return None
    best = max(evaluations, key=lambda e: float(e["mean_return"]))
    return (f"evaluations: {len(evaluations)}; the last {_evaluation(evaluations[-1])}; "
            f"the best {_evaluation(best)}")


def speed_line(run: dict[str, Any]) -> str:
    """``3,120 env-steps/s; 18.9 s in all: 16.0 s running, 2.9 s start-up and shutdown``."""
    wall = float(run.get("wall_s") or 0.0)
    rate = (f"{float(env_steps_rate(run) or 0.0):,.0f} env-steps/s" if acts_in_env(run)
            else f"{int((run.get('counts') or {}).get('updates', 0)):,} updates, {float(run.get('samples_per_s') or 0):,.0f} samples/s")
    elapsed = run.get("elapsed_s")
    if elapsed is None:
        return f"{rate}; {wall:.1f} s running"
    return f"{rate}; {float(elapsed):.1f} s in all: {wall:.1f} s running, {max(0.0, float(elapsed) - wall):.1f} s start-up and shutdown"


def train_summary(run: dict[str, Any], verbose_hint: str | None = None) -> str:
    """The lines that end a train run's console output: how it ended, its return, evaluations,
    env-steps/s and time (``verbose_hint``: how to ask for the data-path figures, None: shown)."""
    status = str(run.get("status", "finished"))
    reason = run.get("stop_reason")
    lines = [f"{run.get('name', 'train')}: {status}" + (f"; {reason}" if reason else "")]
    if acts_in_env(run):
        lines.append("  " + return_line(run))
    evaluations = evaluations_line(run)
    if evaluations:
        lines.append("  " + evaluations)
    solved = solved_line(run)
    if solved:
        lines.append("  " + solved)
    lines.append("  " + speed_line(run))
    if verbose_hint:
        lines.append(f"  the data-path figures (samples/s, stage times, messages): {verbose_hint}, and results.json")
    return "\n".join(lines)


def ended(run: RunResult | dict[str, Any], reason: str, elapsed_s: float) -> None:
    """Record on ``run`` why it ended and how long its session took in all (start-up and shutdown too)."""
    if isinstance(run, RunResult):
        run.stop_reason, run.elapsed_s = reason, elapsed_s
    else:
        run.update(stop_reason=reason, elapsed_s=elapsed_s)


def whole_budget(cfg: RunConfig) -> RunConfig:
    """``cfg`` with ``total_env_steps`` rounded up, once, to the whole rounds its run acts in (every
    worker's rollout: ``num_actors x envs_per_actor x rollout_length`` env steps), so the budget, the
    progress line, config.yaml and results.json all say what runs; a line says so when it differs.

    Where the asked value sets more than the rounds (off-policy: the updates the ratio allows and
    the exploration schedule follow it), it is kept, so the run trains as asked, and the line says
    how many env steps the run acts."""
    from janus.algorithms.base import algorithm
    from janus.runtime.plan import plan_of

    w = cfg.workload
    total = plan_of(cfg).env_step_total  # 0: the synthetic workload counts updates
    if not total or total == w.total_env_steps:
        return cfg
    rounds = (f"whole rounds of {cfg.rollout_transitions:,} env steps ({w.num_actors} worker(s) x {w.envs_per_actor} "
              f"envs x {w.rollout_length} steps)")
    rounded = replace(cfg, workload=replace(w, total_env_steps=total))
    algo = algorithm(w.algo)
    if algo.budget(rounded) != algo.budget(cfg):
        print(f"janus: {cfg.name}: acts {total:,} env steps for total_env_steps {w.total_env_steps:,}: {rounds}; "
              f"the updates and schedules follow the {w.total_env_steps:,} asked", flush=True)
        return cfg
    print(f"janus: {cfg.name}: total_env_steps {w.total_env_steps:,} runs as {total:,}, {rounds}", flush=True)
    return rounded
