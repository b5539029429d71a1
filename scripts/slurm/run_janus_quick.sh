#!/usr/bin/env bash
# Quick comparison, `janus compare --quick` (a smoke test of minutes), as a SLURM job or anywhere:
#
#   sbatch scripts/slurm/run_janus_quick.sh [extra janus compare args]   # from the repo root
#   bash   scripts/slurm/run_janus_quick.sh [extra janus compare args]   # no SLURM needed
#
# Same settings as run_janus.sh, which does the work: JANUS_MODULES (module load targets, default
# none), JANUS_VENV (default .venv, made with `make setup` if missing), JANUS_CONFIG (default
# configs/default.yaml), JANUS_OUT (default runs/slurm-$SLURM_JOB_ID; outside SLURM
# runs/local-<date>-<time>), JANUS_ROOT (repository root, found by default).
#
# GPU: optional; without one the CUDA-only configurations are reported as skipped. To include
# them, remove one '#' from the --gres line below or submit with `sbatch --gres=gpu:1 ...`.
# The log goes to the directory sbatch was called from (SLURM does not create directories).
#
#SBATCH --job-name=janus-compare-quick
#SBATCH --time=00:30:00
#SBATCH --cpus-per-task=4
#SBATCH --mem=8G
##SBATCH --gres=gpu:1
#SBATCH --output=%x-%j.log

set -euo pipefail

is_root() { [[ -n "$1" && -f "$1/pyproject.toml" && -f "$1/scripts/slurm/run_janus.sh" ]]; }

# Under sbatch this file runs from a spool copy: fall back to the submit directory.
script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
for candidate in "${JANUS_ROOT:-}" "$script_dir/../.." "${SLURM_SUBMIT_DIR:-}" "$PWD"; do
    if is_root "$candidate"; then
        export JANUS_ROOT="$(cd "$candidate" && pwd)"
        exec bash "$JANUS_ROOT/scripts/slurm/run_janus.sh" --quick "$@"
    fi
done
echo "error: cannot find the janus repository root; submit from it or set JANUS_ROOT" >&2
exit 2
