"""The import graph: no cycle among janus modules, the layers import nothing above them, the
utility modules import only each other, and the runtime and config import no algorithm.

Imports count wherever they are: at module level, inside functions (an import there still runs,
later) and under ``if TYPE_CHECKING:`` (the modules depend on each other all the same)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import janus

SRC = Path(janus.__file__).resolve().parent
# The algorithms' and environments' own modules: what an algorithm brings, which the runtime and the
# run's config never import (janus.algorithms.base, the seam, and presets.py, the family lookup, are not here).
ALGORITHM_MODULES = {"janus.algorithms.dqn", "janus.algorithms.dqn_agent", "janus.algorithms.ppo", "janus.algorithms.ppo_agent",
                     "janus.algorithms.sac", "janus.algorithms.synthetic",
                     "janus.algorithms.impala", "janus.algorithms.gym_algorithm", "janus.algorithms.networks",
                     "janus.algorithms.shared", "janus.algorithms.linear_chain", "janus.algorithms.normalization",
                     "janus.algorithms.optim", "janus.algorithms.seeding", "janus.algorithms.returns",
                     "janus.algorithms.vtrace"}
ENV_MODULES = {"janus.envs.vector", "janus.envs.atari", "janus.envs.image_catch", "janus.envs.envpool_vector",
               "janus.envs.observations", "janus.envs.reward_scaling"}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, top_level_only: bool) -> set[str]:
    """janus modules ``path`` imports (at module level only, or anywhere, even inside functions)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("janus")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("janus"):
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}  # `from janus.runtime import checkpoints`
    return out


def graph(top_level_only: bool) -> dict[str, set[str]]:
    modules = {module_name(p): p for p in SRC.rglob("*.py")}
    # a module's own parent packages are imported before it anyway: not an edge of a cycle
    return {name: {m for m in imports(path, top_level_only) if m in modules and not (name + ".").startswith(m + ".")}
            for name, path in modules.items()}


# Edges left out of the cycle check, each with the reason it cannot go yet. Every entry must still
# be an edge of the graph (test_the_cycle_allow_list_is_current). None today: janus.config and
# janus.algorithms.base meet in janus.config.schema (the types), below both.
ALLOWED_CYCLE_EDGES: set[tuple[str, str]] = set()

# Each layer (a package or module and everything under it) and what it may never import, even
# indirectly. From the bottom: the replay library stands alone; environments serve the algorithms;
# the run's configuration is read by everything above it; algorithms plug into the runtime; the
# runtime runs them; the harness is what the commands run; the API and the CLI sit on top.
LAYERS = {
    "janus.buffer": ("janus.runtime", "janus.harness", "janus.cli", "janus.api", "janus.algorithms", "janus.envs",
                     "janus.config", "janus.policy"),
    # environments serve the algorithms and know none of them (checked directly below: janus.config,
    # which envs read for the vector-env choices, still asks the algorithm registry inside functions)
    "janus.envs": ("janus.buffer", "janus.runtime", "janus.harness", "janus.cli", "janus.api", "janus.policy"),
    "janus.config": ("janus.runtime", "janus.harness", "janus.cli", "janus.api"),
    "janus.algorithms": ("janus.harness", "janus.cli", "janus.api"),
    "janus.runtime": ("janus.harness", "janus.cli", "janus.api"),
    "janus.harness": ("janus.cli",),
    "janus.api": ("janus.cli",),  # the API is the core, the command line a layer over it
}
# Modules inside a forbidden layer that a layer may still reach, each with its reason.
LAYER_EXCEPTIONS = {
    # the data-path knobs (JanusConfig): plain values and their checks, held by RunConfig, so reached
    # through janus.config; none of the buffer's machinery (and no torch) comes with them
    # and the collection unit those knobs define (arithmetic on them, reached through the algorithms' pacing)
    "janus.envs": {"janus.buffer.settings", "janus.buffer.pacing.collection"},
}
# Single imports that break a layer today, each with the reason it cannot go yet. Every entry must
# still be an edge of the graph and still reach above its layer (test_the_layer_allow_list_is_current).
ALLOWED_LAYER_EDGES: dict[tuple[str, str], str] = {}  # none: a seed's process runs its request below the CLI
# Modules below every layer: each imports no janus module but these.
UTILITY_MODULES = {"janus.errors", "janus.fileio", "janus.stopping", "janus.spawn", "janus.timeline", "janus.user_code",
                   "janus.module_trust"}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (``[a, b, ..., a]``), or None."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done

    def visit(node: str, stack: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt, stack + [nxt])):
                return cycle
        state[node] = 2
        return None

    for name in sorted(edges):
        if name not in state and (cycle := visit(name, [name])):
            return cycle
    return None


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_no_import_cycle_at_module_level() -> None:
    edges = graph(top_level_only=True)
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])
    assert edges.get("janus.runtime.run"), "the graph was read"


def test_no_import_cycle_counting_imports_inside_functions() -> None:
    edges = graph(top_level_only=False)
    for a, b in ALLOWED_CYCLE_EDGES:
        edges[a].discard(b)
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle (imports inside functions counted): " + " -> ".join(cycle or [])


def test_the_cycle_allow_list_is_current() -> None:
    edges = graph(top_level_only=False)
    gone = sorted(edge for edge in ALLOWED_CYCLE_EDGES if edge[1] not in edges.get(edge[0], ()))
    assert not gone, f"no longer imported: take {gone} out of ALLOWED_CYCLE_EDGES"
    assert not ALLOWED_CYCLE_EDGES or find_cycle(edges), "the allowed edges still close a cycle (else drop them)"


def test_config_and_the_algorithm_seam_meet_in_the_types_below_both() -> None:
    """``janus.config`` asks the algorithm registry; the seam reads the types from ``janus.config.schema``,
    never ``janus.config`` (they once imported each other)."""
    edges = graph(top_level_only=False)
    assert "janus.algorithms.base" in edges["janus.config"]
    assert "janus.config" not in edges["janus.algorithms.base"]
    assert "janus.config.schema" in edges["janus.algorithms.base"]


def layer_breaks(edges: dict[str, set[str]], layer: str, above: tuple[str, ...]) -> list[str]:
    """One import path from ``layer`` into a forbidden module, for each forbidden module it reaches."""
    # from every module of the layer at once; a forbidden module ends its path (one path each)
    path_to = {n: [n] for n in edges if within(n, layer)}
    todo = sorted(path_to)
    while todo:
        node = todo.pop(0)
        for nxt in sorted(edges[node]):
            if nxt not in path_to:
                path_to[nxt] = path_to[node] + [nxt]
                if not any(within(nxt, a) for a in above):
                    todo.append(nxt)
    allowed = LAYER_EXCEPTIONS.get(layer, set())
    return [" -> ".join(path_to[m]) for m in sorted(path_to) if any(within(m, a) for a in above) and m not in allowed]


def test_layers_import_nothing_above_them() -> None:
    """Counting imports inside functions, and what those modules import in turn."""
    edges = graph(top_level_only=False)
    for a, b in ALLOWED_LAYER_EDGES:
        edges.get(a, set()).discard(b)  # an entry that is no edge: test_the_layer_allow_list_is_current says so
    found = [path for layer, above in LAYERS.items() for path in layer_breaks(edges, layer, above)]
    assert not found, "layering broken:\n" + "\n".join(found)
    for layer in LAYERS:
        assert any(within(n, layer) for n in edges), f"{layer}: no such package (rename it in LAYERS)"


def test_the_layer_allow_list_is_current() -> None:
    edges = graph(top_level_only=False)
    gone = sorted(edge for edge in ALLOWED_LAYER_EDGES if edge[1] not in edges.get(edge[0], ()))
    assert not gone, f"no longer imported: take {gone} out of ALLOWED_LAYER_EDGES"
    for source, target in ALLOWED_LAYER_EDGES:
        layer = max((name for name in LAYERS if within(source, name)), key=len)
        assert any(within(target, a) for a in LAYERS[layer]), \
            f"{source} -> {target} breaks no rule of {layer}: take it out of ALLOWED_LAYER_EDGES"


def test_the_utility_modules_import_only_each_other() -> None:
    """errors, fileio, stopping and the other modules below every layer: anything may import them."""
    edges = graph(top_level_only=False)
    assert not UTILITY_MODULES - set(edges), f"not modules: {sorted(UTILITY_MODULES - set(edges))}"
    found = {name: sorted(edges[name] - UTILITY_MODULES) for name in sorted(UTILITY_MODULES) if edges[name] - UTILITY_MODULES}
    assert not found, f"utility modules importing janus modules above them: {found}"


def test_the_api_and_the_config_know_no_command_line() -> None:
    """The Python API is the core and the CLI a thin layer over it: nothing under ``janus.api`` or
    ``janus.config`` imports ``argparse`` or ``janus.cli``, and the harness below the CLI imports no
    ``janus.cli`` (counting imports inside functions, and what those modules import in turn)."""
    edges = graph(top_level_only=False)
    found = [path for layer in ("janus.api", "janus.config", "janus.harness")
             for path in layer_breaks(edges, layer, ("janus.cli",))]
    for path in sorted([*(SRC / "api").rglob("*.py"), *(SRC / "config").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "argparse" or n.startswith("argparse.") for n in names):
                found.append(f"{module_name(path)} imports argparse")
    assert not found, "the API or the config reaches the command line:\n" + "\n".join(found)


RUN_MODULES = {"janus.runtime.run", "janus.runtime.wiring", "janus.runtime.summary"}
"""What runs a run (start, poll, stop), builds its components and sums it up: above the backends."""


def test_backends_never_import_the_run_module() -> None:
    edges = graph(top_level_only=False)
    assert set(edges) >= RUN_MODULES, f"not modules: {sorted(RUN_MODULES - set(edges))}"
    for name, deps in edges.items():
        if name.startswith("janus.runtime.backends"):
            assert not deps & RUN_MODULES, f"{name} imports {sorted(deps & RUN_MODULES)}"


def test_runtime_and_config_import_no_algorithm_or_environment_module() -> None:
    for name, deps in graph(top_level_only=False).items():
        if name.startswith("janus.runtime") or name == "janus.config":
            found = deps & (ALGORITHM_MODULES | ENV_MODULES)
            assert not found, f"{name} imports {sorted(found)}"


def test_environments_import_no_algorithm() -> None:
    edges = graph(top_level_only=False)
    listed = ALGORITHM_MODULES | ENV_MODULES
    assert not listed - set(edges), f"not modules (update ALGORITHM_MODULES / ENV_MODULES): {sorted(listed - set(edges))}"
    for name, deps in edges.items():
        if within(name, "janus.envs"):
            found = sorted(d for d in deps if within(d, "janus.algorithms"))
            assert not found, f"{name} imports {found}"


def test_a_fresh_interpreter_imports_the_runtime_without_an_algorithm() -> None:
    code = (
        "import sys, janus.config, janus.runtime.run, janus.runtime.backends.local, janus.harness.commands\n"
        "loaded = sorted(m for m in sys.modules if m in %r)\n"
        "assert not loaded, loaded\n"
        "from janus.algorithms.base import algorithm\n"
        "assert algorithm('dqn').name == 'dqn' and 'janus.algorithms.dqn' in sys.modules\n"
    ) % (ALGORITHM_MODULES | ENV_MODULES,)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_package_and_the_command_line_import_without_torch() -> None:
    """``import janus`` and ``janus.cli`` load torch only when a run needs it: the command starts in
    tens of milliseconds, so a Ctrl-C at start reaches ``main``'s handler instead of an import."""
    code = ("import sys, janus, janus.cli, janus.api.train; "
            "print(sorted(m for m in ('torch', 'numba', 'janus.buffer.replay') if m in sys.modules)); "
            "from janus import ExperienceBuffer, JanusBuffer, ConfigError; print(ExperienceBuffer.__module__, "
            "'ExperienceBuffer' in dir(janus), 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(SRC.parent), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["[]", "janus.buffer.replay.experience True True"]
    try:
        janus.NotAName  # noqa: B018
    except AttributeError as exc:
        assert "no attribute 'NotAName'" in str(exc)
    else:
        raise AssertionError("janus.NotAName did not raise AttributeError")
    assert janus.__all__ == ["BufferEmptyError", "BufferInputError", "Callback", "Checkpoint", "CheckpointError", "ConfigError",
                             "EarlyStop", "Evaluation", "EvaluationResult", "ExperienceBuffer", "FrameStackReplay", "JanusBuffer",
                             "JanusConfig",
                             "JanusError", "PipelineClosedError", "PlacementUnavailableError", "Policy", "Progress",
                             "ProgressStats", "RunConfig", "RunInfo", "RunRequest", "SeedRuns", "StageStats", "TrainedRun",
                             "WorkloadConfig",
                             "__version__", "evaluate", "load_policy", "train"]  # the eager __init__'s names, then the API's
    assert all(getattr(janus, name) is not None for name in janus.__all__)


def test_the_environments_import_without_torch() -> None:
    """The forkserver of async vector envs preloads janus.envs.vector, and every sub-env process
    forks from it: without torch there, each is a process of gymnasium, numpy and the game."""
    code = "import sys, janus.envs.vector, janus.envs.atari; print('torch' in sys.modules, 'janus/ImageCatch-v0' in " \
           "__import__('gymnasium').registry)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(SRC.parent), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True"]


# ---- inside the buffer: the places of the data path and what each may import ---------------------
# Each place (a package of janus.buffer, or a module beside them) and the places of the buffer it
# may import (itself always), counting imports inside functions and under TYPE_CHECKING. Outside
# the buffer, the LAYERS above hold. From the bottom up: compiled kernels, storage, the replay,
# frame replay, the pacing, the staging ends and operators, and the pipeline that wires them.
BUFFER_PLACES: dict[str, set[str]] = {
    "janus.buffer.settings": set(),
    "janus.buffer.arguments": set(),
    "janus.buffer.kernels": {"janus.buffer.settings"},
    "janus.buffer.storage": set(),
    "janus.buffer.replay": {"janus.buffer.arguments", "janus.buffer.kernels", "janus.buffer.storage"},
    "janus.buffer.frames": {"janus.buffer.arguments", "janus.buffer.kernels", "janus.buffer.storage",
                            "janus.buffer.replay"},
    "janus.buffer.pacing": {"janus.buffer.arguments"},
    # the operators name what they write into and read from by Protocols (no replay or frames types);
    # from the replay they still take the sampler's generators (SelectionOp: make_generator and the
    # on-policy epoch_permutation) and the field-name rules a put piece shares with extend
    "janus.buffer.staging": {"janus.buffer.pacing", "janus.buffer.storage", "janus.buffer.replay.samplers",
                             "janus.buffer.replay.field_checks"},
    "janus.buffer.stage_stats": set(),
    "janus.buffer.stage_threads": set(),
    "janus.buffer.collector": {"janus.buffer.pacing", "janus.buffer.staging", "janus.buffer.stage_stats"},
    "janus.buffer.selector": {"janus.buffer.pacing", "janus.buffer.staging", "janus.buffer.stage_stats"},
    "janus.buffer.diagnosis": {"janus.buffer.pacing", "janus.buffer.staging"},
    "janus.buffer.sequence_writer": {"janus.buffer.arguments"},  # the actor-side writer of R2D2's sequences
}


def test_buffer_places_import_only_the_places_below_them() -> None:
    """Every module of the buffer belongs to a place, and imports of the buffer only its own place
    and those listed for it (the pipeline, janus.buffer.pipeline, and the package face may import any)."""
    edges = graph(top_level_only=False)
    free = {"janus.buffer", "janus.buffer.pipeline"}
    found, homeless = [], []
    for name, deps in sorted(edges.items()):
        if not within(name, "janus.buffer") or name in free:
            continue
        place = next((p for p in BUFFER_PLACES if within(name, p)), None)
        if place is None:
            homeless.append(name)
            continue
        allowed = {place, *BUFFER_PLACES[place]}
        found += [f"{name} -> {d}" for d in sorted(deps)
                  if within(d, "janus.buffer") and d != "janus.buffer" and not any(within(d, a) for a in allowed)]
    assert not homeless, f"buffer modules in no place of BUFFER_PLACES: {homeless}"
    assert not found, "a buffer place imports one above it:\n" + "\n".join(found)
    assert "janus.buffer.staging.collection" in edges and "janus.buffer.kernels.native" in edges, "the graph was read"
