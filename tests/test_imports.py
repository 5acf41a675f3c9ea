"""The course library's modules import one another without a circle (tinygpt_course/*):
a module that needs another's helper and is needed by it is two halves of one thing, or a
third module both should import. Read from the source (every `import`, at any depth, relative
or absolute), so that an import hidden in a function to dodge the circle counts too."""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tinygpt_course"


def modules(package=PACKAGE):
    """{dotted name: path} of every module of the package."""
    found = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name, path, known):
    """The package's modules that module `name` imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            candidates = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in known:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                targets.add(candidate)
    return targets


def circles(graph):
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on, stack, found, counter = {}, {}, set(), [], [], 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def graph_of(package=PACKAGE):
    known = modules(package)
    return {name: imports(name, path, known) for name, path in known.items()}


def test_no_module_of_the_library_imports_itself_in_a_circle():
    assert circles(graph_of()) == []


def test_a_circle_is_found(tmp_path):
    """The check can fail: two modules that import each other, one of them inside a function."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "a.py").write_text("from . import b\n")
    (package / "sub" / "b.py").write_text("def f():\n    from pkg.sub.a import x\n")
    (package / "c.py").write_text("from .sub import a\n")
    assert circles(graph_of(package)) == [["pkg.sub.a", "pkg.sub.b"]]
