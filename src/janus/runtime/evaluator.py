"""The Evaluator: greedy episodes of the latest policy every ``eval_interval_steps`` env steps.

The Orchestrator sends :class:`EvaluateMsg` each time the run's env steps cross the next multiple
of ``runtime.eval_interval_steps``. The Evaluator asks the Trainer for its latest parameters,
plays ``runtime.eval_episodes`` episodes of the deterministic policy on its own environment (in a
thread of its own, so it keeps answering pings and never holds up training), reports the mean
return to the Orchestrator (``results.json``: ``evaluations``) and, when it beats every earlier
evaluation, writes the policy to ``best/policy.pt`` of the run folder (atomically, with its env
steps and return): ``janus.load_policy(RUN_DIR / "best")`` loads it. Every evaluation uses the
same environment seeds, so returns compare across the run.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from janus import policy as policies  # attributes read at call time: tests replace them
from janus.buffer.storage.state_file import load_state, save_atomic
from janus.policy import BEST_FORMAT
from janus.runtime.component import Component, Handlers
from janus.runtime.messages import CountsMsg, EvaluateMsg, EvaluationReport, FetchParamsMsg, LoadParamsMsg

EVAL_SEED_OFFSET = 1_000_003  # evaluation envs never share seeds with training envs


class Evaluator(Component):
    """Plays greedy episodes of parameter snapshots; keeps the best one on disk."""

    def __init__(self, name: str, trainer: str, orchestrator: str, make_policy: Callable[[], Any],
                 episodes: int, best_path: str | None, seed: int) -> None:
        super().__init__(name)
        self.trainer = trainer
        self.orchestrator = orchestrator
        self.make_policy = make_policy
        self.episodes = episodes
        self.best_path = Path(best_path) if best_path else None
        self.seed = seed + EVAL_SEED_OFFSET
        self.policy: Any = None
        self.best_return = float("-inf")
        self.queued: list[int] = []  # env steps of evaluations asked for and not yet started
        self.running: threading.Thread | None = None
        self.result: tuple[int, int, list[float]] | None = None
        self.failure: BaseException | None = None

    def handlers(self) -> Handlers:
        return {**super().handlers(), EvaluateMsg: self.on_EvaluateMsg, LoadParamsMsg: self.on_LoadParamsMsg}

    def on_StartMsg(self, msg: Any) -> None:
        super().on_StartMsg(msg)
        if self.policy is None:
            self.policy = self.make_policy()
            self.best_return = previous_best(self.best_path)

    def on_EvaluateMsg(self, msg: EvaluateMsg) -> None:
        self.queued.append(msg.env_steps)
        if self.running is None and len(self.queued) == 1:
            self.send(self.trainer, FetchParamsMsg(self.name, 0))  # the latest version it has

    def on_LoadParamsMsg(self, msg: LoadParamsMsg) -> None:
        if not self.queued or self.running is not None:
            return
        env_steps = self.queued[-1]  # evaluations asked for while one ran: only the newest is played
        self.queued.clear()
        params = self.outbox.resolve(msg.params)
        arrays = {k: torch.tensor(np.array(v)) for k, v in dict(params.arrays).items()}
        self.running = threading.Thread(target=self._play, args=(env_steps, msg.version, arrays),
                                        name=f"{self.name}-episodes", daemon=True)
        self.running.start()

    def _play(self, env_steps: int, version: int, arrays: dict[str, torch.Tensor]) -> None:
        try:
            torch.set_num_threads(1)
            self.policy.load_params(arrays)
            returns = policies.episode_returns(self.policy, self.episodes, self.seed)
            if statistics.fmean(returns) > self.best_return and self.best_path is not None:
                save_best(self.best_path, arrays, env_steps, statistics.fmean(returns), version)
            self.result = (env_steps, version, returns)
        except BaseException as exc:  # noqa: BLE001 - raised in the component's thread by step()
            self.failure = exc

    def step(self) -> bool:
        if self.failure is not None:
            raise self.failure
        if self.running is None or self.running.is_alive():
            return False
        self.running = None
        assert self.result is not None
        env_steps, version, returns = self.result
        mean = statistics.fmean(returns)
        self.best_return = max(self.best_return, mean)
        self.count("evaluations")
        self.send(self.orchestrator, CountsMsg(self.name, EvaluationReport(
            env_steps, version, mean, statistics.pstdev(returns), len(returns))))
        if self.queued:
            self.send(self.trainer, FetchParamsMsg(self.name, 0))
        return True

    def on_StopMsg(self, msg: Any) -> None:
        if self.running is not None:  # an evaluation in progress finishes (and keeps its best)
            self.running.join(60.0)
        super().on_StopMsg(msg)


def previous_best(path: Path | None) -> float:
    """The return of the best policy a resumed run kept (``-inf``: none)."""
    if path is None or not path.is_file():
        return float("-inf")
    return float(load_state(path, fmt=BEST_FORMAT).get("eval_return", float("-inf")))


def save_best(path: Path, params: dict[str, torch.Tensor], env_steps: int, mean_return: float, version: int) -> None:
    """Write the best policy so far (checksummed, atomic, never through a symlink)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    save_atomic({"params": params, "env_steps": int(env_steps), "eval_return": float(mean_return), "version": int(version)},
                path, fmt=BEST_FORMAT)
