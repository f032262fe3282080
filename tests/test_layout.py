"""The package layout: imports point only downward, no cycles, and the public API stays importable.

The import graph is built from the source with ``ast`` (every ``import``, module-level or inside a
function, since a lazy import is still a dependency), at module granularity: ``from a.b import c``
is an edge to ``a.b.c`` when that is a module, else to ``a.b``. Importing ``a.b`` also runs
``a/__init__``, but that implicit parent edge is not counted (every re-exporting ``__init__`` would
otherwise close a cycle with its own children); a package's ``__init__`` is a module like any other.
"""
from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("prs", "theory", "experiments")

# Rooms, bottom to top. An import may go to the same room or to a lower rank, never up or sideways.
RANKS = {
    "prs.core": 0,
    "prs.parallel": 1, "theory": 1,
    "prs.models": 2, "prs.rewards": 2, "prs.sim": 2,
    "prs.rollout": 2.5,  # rollout engines: above the models they wrap, below the RL loop and tasks
    "prs.rl": 3,
    "prs.tasks": 4,
    "prs.analysis": 5,
    "prs": 6,
    "experiments.studies": 6.5,  # one study's analysis each, below the command lines that run them
    "experiments": 7,
}

# Every name `prs/__init__.py` exported before the layout change; users' code imports these.
PUBLIC_API = """
ModelConfig PrefixConfig PrefixState Rollout SamplerConfig agg_denominator analysis append_and_resume audit
available_rewards best_at_k binary_test_reward bucket_length cap_successes_per_task decode_step eqs eqs_verdict
forward fraction_test_reward get_reward gold_sanity_gate group_advantages group_pass_rates hf hybrid_score
init_cache init_params load_checkpoint load_hf_state_dict math_reward math_verify mixed_groups orm_score
pad_to_bucket pass_at_k policy_loss prefill prefix register_reward rewards sample save_checkpoint swe_rl_reward
token_entropy token_logprobs verifiers verify_answer
""".split()


def module_files(root: pathlib.Path, packages=PACKAGES) -> dict[str, pathlib.Path]:
    """Dotted module name -> source file, for every ``.py`` under the given top-level packages."""
    out = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def import_graph(root: pathlib.Path, packages=PACKAGES) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports (see the module docstring)."""
    files = module_files(root, packages)
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative import
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                targets = [f"{src}.{a.name}" if f"{src}.{a.name}" in files else src for a in node.names]
            for t in targets:
                while t and t not in files:  # `import a.b.c` of a non-module attribute: nearest module
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    graph[mod].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle ``[a, b, ..., a]`` of the directed graph, or None (iterative DFS, 3 colours)."""
    colour = {v: 0 for v in graph}
    for start in sorted(graph):
        if colour[start]:
            continue
        stack, path = [(start, iter(sorted(graph[start])))], [start]
        colour[start] = 1
        while stack:
            v, it = stack[-1]
            w = next(it, None)
            if w is None:
                colour[v] = 2
                stack.pop()
                path.pop()
            elif colour.get(w, 2) == 1:
                return path[path.index(w):] + [w]
            elif colour.get(w, 2) == 0:
                colour[w] = 1
                stack.append((w, iter(sorted(graph[w]))))
                path.append(w)
    return None


def room(mod: str) -> str:
    """The room (key of ``RANKS``) a module belongs to: its longest matching prefix."""
    best = max((r for r in RANKS if mod == r or mod.startswith(r + ".")), key=len, default=None)
    if best is None:
        raise KeyError(f"module {mod} is in no room; add its package to RANKS")
    return best


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Edges that go up or sideways between rooms, and task modules importing the RL loop."""
    bad = []
    for src, dsts in graph.items():
        for dst in dsts:
            rs, rd = room(src), room(dst)
            if rs != rd and RANKS[rd] >= RANKS[rs]:
                bad.append(f"{src} -> {dst} ({rs} rank {RANKS[rs]} may not import {rd} rank {RANKS[rd]})")
            if rs == "prs.tasks" and rd == "prs.rl" and dst != "prs.rl.episodes":
                bad.append(f"{src} -> {dst} (tasks depend on prs.rl.episodes only, never the trainer)")
    return bad


# ------------------------------------------------------------------------------------ the repo


def test_repo_has_no_import_cycle():
    graph = import_graph(ROOT)
    assert len(graph) > 40 and "prs.core.losses" in graph and "prs.rl.trainer" in graph
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def test_imports_point_only_downward():
    assert layer_violations(import_graph(ROOT)) == []


def test_core_imports_no_other_prs_subpackage():
    graph = import_graph(ROOT)
    core = {m: d for m, d in graph.items() if room(m) == "prs.core"}
    assert {"prs.core.advantages", "prs.core.losses", "prs.core.prefix"} <= set(core)
    outside = {f"{m} -> {d}" for m, ds in core.items() for d in ds if room(d) != "prs.core"}
    assert outside == set()


def test_every_subpackage_init_says_what_lives_there():
    for pkg in ("core", "models", "parallel", "rollout", "rl", "tasks", "rewards", "sim", "analysis"):
        doc = ast.get_docstring(ast.parse((ROOT / "prs" / pkg / "__init__.py").read_text()))
        assert doc and 2 <= len(doc.strip().splitlines()) <= 6, pkg
        assert "import" in doc, f"prs/{pkg}/__init__.py must say what it may import"


def test_public_api_is_importable_from_prs():
    prs = importlib.import_module("prs")
    missing = [n for n in PUBLIC_API if not hasattr(prs, n)]
    assert missing == []
    from prs import group_advantages, policy_loss, sample, PrefixConfig  # noqa: F401  (the issue's example)


# ------------------------------------------------------------------ the checker itself can fail


def test_find_cycle_on_synthetic_graphs():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None  # a diamond is no cycle
    cyc = find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    assert cyc is not None and cyc[0] == cyc[-1] and set(cyc) == {"a", "b", "c"}
    assert find_cycle({"x": {"x2"}, "x2": {"x2b"}, "x2b": {"x2"}}) == ["x2", "x2b", "x2"]


def test_a_deliberate_cycle_in_a_package_is_found(tmp_path):
    """The module ring that used to exist (model -> hf -> tasks -> trainer -> model), rebuilt in a
    throw-away package, is reported; so is an upward import out of ``prs.core``."""
    pkg = tmp_path / "prs"
    for sub in ("core", "models", "rl", "tasks"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text('"""x."""\n')
    (pkg / "__init__.py").write_text("")
    (pkg / "models" / "qwen3.py").write_text("def f():\n    from prs.models import hf\n")
    (pkg / "models" / "hf.py").write_text("from prs.tasks.math_jsonl import SHIPPED\n")
    (pkg / "tasks" / "math_jsonl.py").write_text("from prs.rl.trainer import Episodes\nSHIPPED = 1\n")
    (pkg / "rl" / "trainer.py").write_text("from prs.models.qwen3 import f\nEpisodes = 1\n")
    (pkg / "core" / "losses.py").write_text("import prs.rl.trainer\n")
    graph = import_graph(tmp_path, packages=("prs",))
    cyc = find_cycle(graph)
    assert cyc is not None and {"prs.models.qwen3", "prs.models.hf", "prs.tasks.math_jsonl", "prs.rl.trainer"} <= set(cyc)
    bad = layer_violations(graph)
    assert any(b.startswith("prs.core.losses -> prs.rl.trainer") for b in bad)
    assert any(b.startswith("prs.models.hf -> prs.tasks.math_jsonl") for b in bad)
    assert any("never the trainer" in b for b in bad)
    # breaking the ring removes the cycle
    (pkg / "models" / "hf.py").write_text("SHIPPED = 2\n")
    assert find_cycle(import_graph(tmp_path, packages=("prs",))) is None


@pytest.mark.parametrize("mod", ["prs.core", "prs.models", "prs.parallel", "prs.rollout", "prs.rl", "prs.tasks", "prs.rewards",
                                 "prs.sim", "prs.analysis", "experiments.studies.trap", "experiments.studies.decisive"])
def test_each_room_imports_on_its_own(mod):
    importlib.import_module(mod)


def test_pyproject_extras_exist_and_dev_has_nbconvert():
    """Every ``pkg[extra]`` in the optional dependencies names an extra the installed ``pkg`` provides,
    spelt as it publishes it (``math-verify[antlr4_9_3]`` made pip warn that the extra does not exist);
    ``[dev]`` carries nbconvert (the notebooks' ``jupyter nbconvert --execute``)."""
    import importlib.metadata as md
    import re
    import tomllib

    opt = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for group, reqs in opt.items():
        for req in reqs:
            m = re.match(r"([A-Za-z0-9_.-]+)\[([^\]]+)\]", req)
            if not m:
                continue
            try:
                provided = set(md.metadata(m.group(1)).get_all("Provides-Extra") or [])
            except md.PackageNotFoundError:
                continue
            for extra in m.group(2).split(","):
                assert extra.strip() in provided, f"[{group}] {req}: {m.group(1)} provides {sorted(provided)}"
    assert any(r.startswith("nbconvert") for r in opt["dev"])


def test_import_prs_stays_light():
    """``import prs`` loads the kernels and models, not the run analysis (``prs.analysis`` on first use)."""
    import subprocess
    import sys

    code = "import sys, prs; print('prs.analysis' in sys.modules); prs.analysis; print('prs.analysis' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.split() == ["False", "True"]


def private_imports(root: pathlib.Path, modules, packages=PACKAGES) -> list[str]:
    """``from a.b import _x`` and ``import a.b as m ... m._x`` where ``_x`` is a private name of another
    module (``__dunder__`` names and private *modules* of the importer's own package are allowed)."""
    files = module_files(root, packages)
    bad = []
    for mod in modules:
        tree = ast.parse(files[mod].read_text())
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    if full in files:  # a module: private modules only within their own package
                        if a.name.startswith("_") and node.module != mod.rpartition(".")[0]:
                            bad.append(f"{mod}: from {node.module} import {a.name}")
                        aliases[a.asname or a.name] = full
                    elif a.name.startswith("_") and not a.name.startswith("__"):
                        bad.append(f"{mod}: from {node.module} import {a.name}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname and a.name in files:
                        aliases[a.asname] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                bad.append(f"{mod}: {node.value.id}.{node.attr} ({aliases[node.value.id]})")
    return bad


def test_analysis_and_studies_use_only_public_names():
    mods = [m for m in module_files(ROOT) if room(m) in ("prs.analysis", "experiments.studies")]
    mods += ["experiments.analyze", "experiments.sim_grid", "experiments.simulate", "experiments.trap_summary",
             "prs.models.qwen3"]
    assert {"prs.analysis.bootstrap", "experiments.studies.trap"} <= set(mods)
    assert private_imports(ROOT, mods) == []


def test_private_import_checker_can_fail(tmp_path):
    pkg = tmp_path / "prs"
    (pkg / "core").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "__init__.py").write_text("")
    (pkg / "core" / "_validate.py").write_text("x = 1\n")
    (pkg / "core" / "a.py").write_text("from prs.core import _validate as v\n_y = 1\n")  # allowed: own package
    (pkg / "b.py").write_text("from prs.core.a import _y\nfrom prs.core import a as m\nfrom prs.core import _validate\n"
                              "z = m._y\n")
    got = private_imports(tmp_path, ["prs.core.a", "prs.b"], packages=("prs",))
    assert got == ["prs.b: from prs.core.a import _y", "prs.b: from prs.core import _validate",
                   "prs.b: m._y (prs.core.a)"]


def test_study_code_moved_out_of_the_library_says_where():
    import prs.analysis as an

    with pytest.raises(ImportError, match=r"prs.analysis.trap moved to experiments.studies.trap"):
        from prs.analysis import trap  # noqa: F401
    with pytest.raises(ImportError, match=r"experiments.studies.notebook"):
        an.notebook_runs
    with pytest.raises(AttributeError):
        an.no_such_name
    from experiments.studies import decisive, notebook, trap  # noqa: F401
    for name, mod in an.MOVED.items():
        assert hasattr(importlib.import_module(mod), name) or mod.endswith(name), (name, mod)


# Test folders and the code folder each mirrors: tests/<room>/test_<module>[_<aspect>].py tests
# <code folder>/<module>.py, so a module's tests are found by its name.
TEST_MIRROR = {
    **{room: f"prs/{room}" for room in
       ("core", "models", "parallel", "rewards", "rollout", "rl", "tasks", "analysis", "sim")},
    "theory": "theory", "experiments": "experiments", "experiments/studies": "experiments/studies",
    "benchmarks": "benchmarks",
    ".": "prs",  # tests/test_<m>.py: the modules of prs/ itself (plan, plan_compiled)
}
TEST_TOP_LEVEL = ("test_layout.py",)  # cross-cutting tests that test no one module


def misplaced_tests(root: pathlib.Path, mirror=TEST_MIRROR, top_level=TEST_TOP_LEVEL) -> list[str]:
    """Each test file and test folder under ``root/tests`` that breaks the mirror rule above, with
    the reason; empty when every test file is named after a module of the folder it mirrors."""
    tests = root / "tests"
    bad = []
    for d in sorted(p for p in tests.rglob("*") if p.is_dir() and p.name not in ("__pycache__", "data")
                    and "data" not in p.relative_to(tests).parts):
        if d.relative_to(tests).as_posix() not in mirror:
            bad.append(f"tests/{d.relative_to(tests).as_posix()}/: a folder that mirrors no code folder")
    for path in sorted(tests.rglob("test_*.py")):
        folder = path.parent.relative_to(tests).as_posix()
        if folder not in mirror or (folder == "." and path.name in top_level):
            continue
        code = root / mirror[folder]
        modules = {p.stem for p in code.glob("*.py") if not p.stem.startswith("_")}
        name = path.stem[len("test_"):]
        if not any(name == m or name.startswith(m + "_") for m in modules):
            bad.append(f"{path.relative_to(root).as_posix()}: names no module of {mirror[folder]}/ "
                       f"(test_<module>.py or test_<module>_<aspect>.py)")
    return bad


def test_tests_mirror_the_package():
    assert misplaced_tests(ROOT) == []


def test_test_mirror_checker_can_fail(tmp_path):
    (tmp_path / "prs" / "core").mkdir(parents=True)
    (tmp_path / "prs" / "core" / "losses.py").write_text("")
    (tmp_path / "prs" / "plan.py").write_text("")
    (tmp_path / "tests" / "core").mkdir(parents=True)
    (tmp_path / "tests" / "misc").mkdir()
    (tmp_path / "tests" / "data" / "records").mkdir(parents=True)
    for f in ("core/test_losses.py", "core/test_losses_menu.py", "test_plan_vllm.py", "test_layout.py",
              "core/test_lossesx.py", "test_trainer.py", "misc/test_x.py"):
        (tmp_path / "tests" / f).write_text("")
    assert misplaced_tests(tmp_path) == [
        "tests/misc/: a folder that mirrors no code folder",
        "tests/core/test_lossesx.py: names no module of prs/core/ (test_<module>.py or test_<module>_<aspect>.py)",
        "tests/test_trainer.py: names no module of prs/ (test_<module>.py or test_<module>_<aspect>.py)",
    ]
