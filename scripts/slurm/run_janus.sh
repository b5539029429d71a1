#!/usr/bin/env bash
# Run the full comparison, `janus compare`, as a SLURM batch job or on any machine:
#
#   sbatch scripts/slurm/run_janus.sh [extra janus compare args]     # from the repo root
#   bash   scripts/slurm/run_janus.sh [extra janus compare args]     # no SLURM needed
#
# Settings (environment variables, with defaults):
#   JANUS_MODULES  space-separated `module load` targets, e.g. "python/3.11 cuda/12.4" (default:
#                  none; skipped with a warning where the `module` command is unavailable)
#   JANUS_VENV     virtual environment holding the `janus` command (default .venv; created with
#                  `make setup` when missing)
#   JANUS_CONFIG   config file (default configs/default.yaml)
#   JANUS_OUT      output directory (default runs/slurm-$SLURM_JOB_ID, outside SLURM
#                  runs/local-<date>-<time>)
#   JANUS_ROOT     repository root (default: found from this script or the submit directory)
# Relative paths are taken from the repository root. Arguments are passed on to `janus compare`.
#
# GPU: optional. Without one, `placement: auto` resolves to CPU and the CUDA-only configurations
# are reported as skipped. To measure them, request a GPU: remove one '#' from the --gres line
# below, or submit with `sbatch --gres=gpu:1 scripts/slurm/run_janus.sh` (some clusters also need
# --partition=<gpu partition>).
# The log goes to the directory sbatch was called from (SLURM does not create directories).
#
#SBATCH --job-name=janus-compare
#SBATCH --time=02:00:00
#SBATCH --cpus-per-task=8
#SBATCH --mem=32G
##SBATCH --gres=gpu:1
#SBATCH --output=%x-%j.log

set -euo pipefail

is_root() { [[ -n "$1" && -f "$1/pyproject.toml" && -d "$1/src/janus" ]]; }

# Under sbatch this file runs from a spool copy, so its own location says nothing: fall back to
# the directory the job was submitted from.
script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT=""
for candidate in "${JANUS_ROOT:-}" "$script_dir/../.." "${SLURM_SUBMIT_DIR:-}" "$PWD"; do
    if is_root "$candidate"; then ROOT="$(cd "$candidate" && pwd)"; break; fi
done
if [[ -z "$ROOT" ]]; then
    echo "error: cannot find the janus repository root; submit from it or set JANUS_ROOT" >&2
    exit 2
fi
cd "$ROOT"

if [[ -n "${SLURM_JOB_ID:-}" ]]; then
    default_out="runs/slurm-$SLURM_JOB_ID"
else
    default_out="runs/local-$(date +%Y%m%d-%H%M%S)"
fi
JANUS_MODULES="${JANUS_MODULES:-}"
JANUS_VENV="${JANUS_VENV:-.venv}"
JANUS_CONFIG="${JANUS_CONFIG:-configs/default.yaml}"
JANUS_OUT="${JANUS_OUT:-$default_out}"

# Environment modules: the `module` function is often not defined in batch shells.
if [[ -n "$JANUS_MODULES" ]]; then
    if ! type module >/dev/null 2>&1; then
        for init in /etc/profile.d/lmod.sh /etc/profile.d/modules.sh; do
            # shellcheck disable=SC1090
            if [[ -f "$init" ]]; then set +u; source "$init"; set -u; break; fi
        done
    fi
    if type module >/dev/null 2>&1; then
        for target in $JANUS_MODULES; do
            echo "module load $target"
            set +u; module load "$target"; set -u
        done
    else
        echo "warning: 'module' is unavailable; not loading: $JANUS_MODULES" >&2
    fi
fi

# Threads: keep torch within the CPUs SLURM gave this job.
if [[ -n "${SLURM_CPUS_PER_TASK:-}" ]]; then
    export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$SLURM_CPUS_PER_TASK}"
fi

if [[ ! -x "$JANUS_VENV/bin/janus" ]]; then
    if ! command -v make >/dev/null 2>&1; then
        echo "error: $JANUS_VENV/bin/janus is missing and 'make' is unavailable to create it" >&2
        exit 2
    fi
    echo "creating $JANUS_VENV with make setup"
    make setup VENV="$JANUS_VENV"
fi
if [[ ! -f "$JANUS_CONFIG" ]]; then
    echo "error: config file not found: $JANUS_CONFIG (set JANUS_CONFIG)" >&2
    exit 2
fi

echo "== janus compare  host=$(hostname)  job=${SLURM_JOB_ID:-none}  $(date -Is)"
echo "   root=$ROOT  commit=$(git rev-parse --short HEAD 2>/dev/null || echo none)"
echo "   venv=$JANUS_VENV  config=$JANUS_CONFIG  out=$JANUS_OUT  args=$*"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
fi

status=0
"$JANUS_VENV/bin/janus" compare --config "$JANUS_CONFIG" --out "$JANUS_OUT" "$@" || status=$?
[[ "$JANUS_OUT" = /* ]] || JANUS_OUT="$ROOT/$JANUS_OUT"
echo "== done (exit $status) $(date -Is); results in $JANUS_OUT"
exit "$status"
