"""Weights & Biases logging for ``janus train --wandb`` (the optional extra: ``pip install 'janus-rl[wandb]'``).

:class:`WandbWriter` takes the scalar stream :mod:`janus.harness.reports.tensorboard` writes (the same tags
at the same env steps: episodes, ``train/*``, ``eval/*``, the run's totals), so W&B shows what
TensorBoard shows, plus the run's resolved configuration. Every scalar is plotted against
``env_steps`` (a W&B step metric): the tags arrive out of step order (episodes, then training
rows, then evaluations), which W&B's own monotonic ``step`` would drop.

With ``WANDB_MODE=offline`` nothing leaves the machine: the run is written under
``RUN_DIR/wandb/offline-run-*`` (``wandb sync`` uploads it later).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from janus.errors import ConfigError

INSTALL = "pip install 'janus-rl[wandb]'"


def require_wandb() -> Any:
    """The ``wandb`` module; a :class:`ConfigError` saying how to install it when it is missing."""
    try:
        import wandb
    except ImportError as exc:
        raise ConfigError(f"--wandb: the wandb package is not installed ({exc}); install it with {INSTALL}, "
                          "or train without --wandb (--tensorboard needs no extra package)") from None
    return wandb


class WandbWriter:
    """A W&B run written like a TensorBoard event file (``add_scalar``/``flush``/``close``).

    Args:
        run_dir: the janus run folder; W&B writes under ``run_dir/wandb``.
        project: the W&B project.
        name: the W&B run's display name.
        config: the resolved configuration, recorded as the W&B run's config.
    """

    def __init__(self, run_dir: str | Path, project: str, name: str, config: dict[str, Any]) -> None:
        wandb = require_wandb()
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        # console "off": W&B would otherwise wrap stdout/stderr, where the progress line redraws itself
        settings = wandb.Settings(console="off", save_code=False, disable_git=True)
        self.run = wandb.init(project=project, name=name, dir=str(run_dir), config=config, settings=settings)
        self.run.define_metric("env_steps")
        self.run.define_metric("*", step_metric="env_steps")
        self.pending: dict[int, dict[str, float]] = {}  # env step -> tag -> value, until the next flush

    def add_scalar(self, tag: str, value: float, step: int, walltime: float | None = None) -> None:
        """Add ``tag = value`` at env step ``step`` (W&B stamps its own wall time: ``walltime`` is not used)."""
        self.pending.setdefault(int(step), {})[tag] = float(value)

    def flush(self) -> None:
        """Log what was added since the last flush, one W&B row per env step."""
        for step in sorted(self.pending):
            self.run.log({**self.pending[step], "env_steps": step})
        self.pending.clear()

    def close(self) -> None:
        """Flush and finish the W&B run."""
        if self.run is not None:
            self.flush()
            self.run.finish()
            self.run = None
