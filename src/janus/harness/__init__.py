"""The command layer: what ``janus compare | train | eval | tune | rollout`` and :func:`janus.train` run.

It builds a command's configurations, runs them on the runtime, measures them and writes the run
folder; the CLI (:mod:`janus.cli`) and the API (:mod:`janus.api`) parse their input and call it.

* ``commands.py``: what each command runs, from its configurations to its saved results;
  ``rollout.py``: ``janus rollout``.
* The run folder: ``run_folder.py`` (which folder a run writes), ``run_lock.py`` (its lock),
  ``resume_checks.py`` and ``resume_commit.py`` (what a resumed run may change, and when its folder
  changes), ``run_ending.py`` (what a failed run's folder says).
* ``experiments/``: the measured experiments behind ``compare`` and ``eval --sweep`` (sweeps,
  interleaved repeats, the granularity probe).
* ``reports/``: tables, results files, charts, learning curves, TensorBoard, W&B, video, progress.
* ``seeds/``: ``janus train --seeds``, a run per seed and their aggregate.
* ``tune/``: ``janus tune``, the search over the data-path knobs.

It imports the runtime, the algorithms, the configuration and the buffer, and not :mod:`janus.cli`
(``tests/test_imports.py``, which names the one import still allowed and why).
"""
