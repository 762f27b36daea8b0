"""The import graph of engine/, conformance/ and reports/, read statically (issue 16).

Every `import` and `from ... import` counts, inside functions too (a lazy import is still an
arrow), relative imports resolved; what sits under `if TYPE_CHECKING:` does not run, so it does not
count. An arrow goes to the most specific module of ours it names: `from engine.ops import shape`
is an arrow to engine.ops.shape, `from engine.ops import LOCAL_VJP` one to engine.ops.

One cycle is allowed: the one operator overloading needs (Tensor.__add__ calls engine.ops, whose
wrappers build Tensors and record tape nodes in engine.autograd). Its strongly connected component
may hold engine.tensor, engine.autograd, engine.ops and engine.ops.* and nothing else; every other
cycle fails, with the import lines that make it, and that cycle must be the only one. engine/ never
imports conformance/ or reports/; conformance/ never reaches reports/, directly or through any
chain of imports (reports imports conformance: `torchlean-conformance report` runs reports' own
command in a child process).
"""
from __future__ import annotations

import ast
import functools
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "conformance", "reports")
OVERLOADING = {"engine.tensor", "engine.autograd", "engine.ops"}   # and engine.ops.*


@dataclass(frozen=True)
class Arrow:
    source: str     # importing module
    target: str     # imported module
    file: str       # the importing file, relative to the repository
    line: int
    text: str       # the import statement as written

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.text}  (-> {self.target})"


def modules(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under the packages."""
    out = {}
    for pkg in packages:
        for f in sorted((root / pkg).rglob("*.py")):
            parts = list(f.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = f
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node, skipping the bodies of `if TYPE_CHECKING:`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _statement(lines: list[bytes], node: ast.stmt) -> str:
    """The statement's source on one line (ast offsets count UTF-8 bytes)."""
    first, last = node.lineno - 1, node.end_lineno - 1
    if first == last:
        text = lines[first][node.col_offset:node.end_col_offset]
    else:
        text = b" ".join([lines[first][node.col_offset:], *lines[first + 1:last],
                          lines[last][:node.end_col_offset]])
    return " ".join(text.decode().split())


@functools.lru_cache(maxsize=4)
def arrows(root: Path, packages=PACKAGES) -> tuple[Arrow, ...]:
    """Every import arrow between modules of the packages, in file and line order."""
    mods = modules(root, packages)

    def ours(name: str) -> str | None:   # the longest prefix that is a module of ours
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    out = []
    for mod, file in mods.items():
        src = file.read_bytes()
        lines = src.splitlines()
        package = mod if file.name == "__init__.py" else mod.rpartition(".")[0]
        for node in sorted(_imports(ast.parse(src, str(file))), key=lambda n: n.lineno):
            targets = []
            if isinstance(node, ast.Import):
                targets = [ours(a.name) for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                for a in node.names:
                    sub = f"{base}.{a.name}" if base else a.name
                    targets.append(sub if sub in mods else ours(base))
            text = _statement(lines, node)
            rel = file.relative_to(root).as_posix()
            out += [Arrow(mod, t, rel, node.lineno, text)
                    for t in dict.fromkeys(targets) if t and t != mod]
    return tuple(out)


def components(arrs: Iterable[Arrow]) -> list[list[str]]:
    """Strongly connected components of more than one module (iterative Tarjan)."""
    graph: dict[str, list[str]] = {}
    for a in arrs:
        graph.setdefault(a.source, []).append(a.target)
        graph.setdefault(a.target, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        comp.append(x)
                        if x == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
            elif w not in index:
                index[w] = low[w] = len(index)
                stack.append(w)
                on.add(w)
                work.append((w, iter(graph[w])))
            elif w in on:
                low[v] = min(low[v], index[w])
    return sorted(found)


def allowed(component: list[str]) -> bool:
    return all(m in OVERLOADING or m.startswith("engine.ops.") for m in component)


def _shortest_cycle(comp: list[str], arrs: Iterable[Arrow]) -> list[Arrow]:
    """One shortest cycle through the component's first module, as the arrows that make it."""
    inside = set(comp)
    by_source: dict[str, list[Arrow]] = {}
    for a in arrs:
        if a.source in inside and a.target in inside:
            by_source.setdefault(a.source, []).append(a)
    start = comp[0]
    came: dict[str, Arrow] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for a in by_source.get(v, []):
            if a.target == start:
                path = [a]
                while path[0].source != start:
                    path.insert(0, came[path[0].source])
                return path
            if a.target not in came:
                came[a.target] = a
                queue.append(a.target)
    return []


def chain(sources: Iterable[str], targets, arrs: Iterable[Arrow]) -> list[Arrow]:
    """A shortest chain of arrows from one of `sources` to a module `targets(name)` accepts (the
    arrows that make it, first to last), or [] when no chain of imports reaches one."""
    by_source: dict[str, list[Arrow]] = {}
    for a in arrs:
        by_source.setdefault(a.source, []).append(a)
    came: dict[str, Arrow | None] = {s: None for s in sources}
    queue = deque(came)
    while queue:
        v = queue.popleft()
        if targets(v):
            path = []
            while came[v] is not None:
                path.insert(0, came[v])
                v = came[v].source
            return path
        for a in by_source.get(v, []):
            if a.target not in came:
                came[a.target] = a
                queue.append(a.target)
    return []


def describe(comp: list[str], arrs: Iterable[Arrow]) -> str:
    inside = set(comp)
    lines = [f"cycle among {len(comp)} modules: {', '.join(comp)}", "  one loop:"]
    lines += [f"    {a}" for a in _shortest_cycle(comp, arrs)]
    lines.append("  every import between them:")
    lines += [f"    {a}" for a in arrs if a.source in inside and a.target in inside]
    return "\n".join(lines)


# --- the tests ------------------------------------------------------------------------------------

def test_no_import_cycle_but_operator_overloading():
    arrs = arrows(REPO)
    bad = [c for c in components(arrs) if not allowed(c)]
    assert not bad, ("import cycles (only engine.tensor / engine.autograd / engine.ops[.*] may "
                     "import each other in a circle):\n\n" +
                     "\n\n".join(describe(c, arrs) for c in bad))


def test_the_declared_cycle_is_the_only_one():
    """Exactly one cycle, and it is operator overloading's (tensor, autograd, ops): a second
    cycle, even one inside the allowed modules, is a second component and fails here."""
    comps = components(arrows(REPO))
    assert len(comps) == 1, "expected only the tensor/autograd/ops cycle, found:\n\n" + \
        "\n\n".join(describe(c, arrows(REPO)) for c in comps)
    assert allowed(comps[0]) and OVERLOADING <= set(comps[0]), comps[0]


def test_conformance_never_reaches_reports():
    """No module of conformance/ imports reports/, directly or through a chain of imports (lazy
    ones included: a function-level import is an arrow too)."""
    arrs = arrows(REPO)
    sources = [m for m in modules(REPO) if m.split(".")[0] == "conformance"]
    path = chain(sources, lambda m: m.split(".")[0] == "reports", arrs)
    assert not path, "conformance/ must not depend on reports/ (reports depends on it):\n" + \
        "\n".join(f"  {a}" for a in path)


def test_engine_imports_neither_conformance_nor_reports():
    bad = [a for a in arrows(REPO) if a.source.split(".")[0] == "engine"
           and a.target.split(".")[0] in ("conformance", "reports")]
    assert not bad, "engine/ must not depend on the harness or the reports:\n" + \
        "\n".join(f"  {a}" for a in bad)


# The one arrow from the ops to a provider: the tape kernels' launch plumbing (CuPy arrays, grids,
# the kernel loader), not a rule; every rule reaches a provider's function through the registry.
OPS_TO_PROVIDER = {("engine.ops._tape_cuda", "engine.providers.native_cuda.launch")}


def test_rules_and_optimizers_reach_providers_through_the_registry():
    """engine/ops/ (local VJP rules) and engine/optim.py never import a provider: the providers
    lend their device functions when they register (engine/registry.py's device rules)."""
    bad = [a for a in arrows(REPO)
           if (a.source.startswith("engine.ops.") or a.source in ("engine.ops", "engine.optim"))
           and a.target.startswith("engine.providers")
           and (a.source, a.target) not in OPS_TO_PROVIDER]
    assert not bad, "look the function up with engine.registry.device_rule instead:\n" + \
        "\n".join(f"  {a}" for a in bad)


def test_no_import_module_of_a_fixed_name():
    """importlib.import_module("fixed.name") hides an arrow from this walker: import it plainly
    (inside the function, to stay lazy). Names computed from data (plugins, registries) are fine."""
    bad = []
    for mod, file in modules(REPO).items():
        src = file.read_text()
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Call) and node.args and \
                    isinstance(node.args[0], ast.Constant) and \
                    isinstance(node.args[0].value, str) and \
                    ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                     or (isinstance(node.func, ast.Name) and
                         node.func.id in ("import_module", "__import__"))):
                bad.append(f"{file.relative_to(REPO).as_posix()}:{node.lineno}: "
                           f"{ast.get_source_segment(src, node)}")
    assert not bad, "imports of a fixed module hidden from the import graph:\n" + "\n".join(bad)


# --- the walker itself, on a small tree --------------------------------------------------------

def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_walker_resolves_relative_lazy_and_submodule_imports(tmp_path):
    root = _tree(tmp_path, {
        "pkg/__init__.py": "X = 1\n",
        "pkg/a.py": "from . import b\nfrom .sub import c as _c\n",
        "pkg/b.py": "def f():\n    from pkg import X\n    import pkg.sub.c\n",
        "pkg/sub/__init__.py": "from .. import a\n",
        "pkg/sub/c.py": "from ..b import f\nimport os\n",
        "pkg/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n"
                    "else:\n    from pkg import b\n",
    })
    got = {(a.source, a.target) for a in arrows(root, ("pkg",))}
    assert got == {("pkg.a", "pkg.b"), ("pkg.a", "pkg.sub.c"), ("pkg.b", "pkg"),
                   ("pkg.b", "pkg.sub.c"), ("pkg.sub", "pkg.a"), ("pkg.sub.c", "pkg.b"),
                   ("pkg.d", "pkg.b")}
    assert components(arrows(root, ("pkg",))) == [["pkg.b", "pkg.sub.c"]]


def test_chain_finds_an_indirect_dependency(tmp_path):
    root = _tree(tmp_path, {"h/__init__.py": "", "h/a.py": "from h import b\n",
                            "h/b.py": "def f():\n    import r.page\n",
                            "r/__init__.py": "", "r/page.py": "import h.a\n",
                            "h/c.py": "import os\n"})
    arrs = arrows(root, ("h", "r"))
    path = chain(["h.a", "h.c"], lambda m: m.startswith("r"), arrs)
    assert [(a.source, a.target) for a in path] == [("h.a", "h.b"), ("h.b", "r.page")]
    assert chain(["h.c"], lambda m: m.startswith("r"), arrs) == []


def test_walker_names_the_lines_of_a_cycle(tmp_path):
    root = _tree(tmp_path, {"q/__init__.py": "", "q/x.py": "import q.y\n",
                            "q/y.py": "\n\ndef g():\n    from q.x import thing\n"})
    arrs = arrows(root, ("q",))
    [comp] = components(arrs)
    text = describe(comp, arrs)
    assert "q/x.py:1: import q.y  (-> q.y)" in text
    assert "q/y.py:4: from q.x import thing  (-> q.x)" in text
    assert not allowed(comp) and allowed(["engine.tensor", "engine.ops.shape"])
