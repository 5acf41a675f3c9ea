"""The support package tinygpt_course.testing: nothing of the course imports it, no learner's
install holds it, nothing reaches it (or anything else) through sys.path, and its catalogue
loader refuses a file that does not say what to expect. Fast."""
import ast
import re
import tomllib
from pathlib import Path

import pytest
import setuptools

from tinygpt_course.checks.protocol import Kind
from tinygpt_course.testing import catalogue
from tinygpt_course.testing.course import REPO

LIBRARY = REPO / "tinygpt_course"


def imported(path):
    """The modules a Python file imports (relative imports resolved against its package)."""
    package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module) if p)
            names |= {module} | {f"{module}.{a.name}" for a in node.names}
    return names


def test_no_course_module_imports_the_support_package():
    """So grading, the sandboxed re-run and a lesson's kernel never load it."""
    for path in LIBRARY.rglob("*.py"):
        if "testing" not in path.relative_to(LIBRARY).parts:
            assert not [m for m in imported(path) if m.startswith("tinygpt_course.testing")], path


def test_a_learners_install_leaves_it_out():
    """pyproject's package list: every package of the course, not this one."""
    find = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = set(setuptools.find_packages(str(REPO), include=find["include"], exclude=find.get("exclude", ())))
    every = {".".join(p.relative_to(REPO).parts[:-1]) for p in LIBRARY.rglob("__init__.py")}
    assert packages == {p for p in every if not p.startswith("tinygpt_course.testing")}


def test_nothing_reaches_code_through_sys_path():
    """Tests, bench, docs and hub scripts import the course and its support package as installed."""
    for folder in ("tests", "bench", "docs", "hub", "scripts"):
        for path in (REPO / folder).rglob("*.py"):
            if "catalogue" in path.parts or path == Path(__file__):
                continue
            assert not re.search(r"sys\.path\.(insert|append|extend)|sys\.path\s*\+?=", path.read_text()), path


def test_catalogue_file_says_what_to_expect(tmp_path):
    (tmp_path / "head").mkdir()
    path = tmp_path / "head" / "01_x.py"
    path.write_text("# why: no expectation\nclass Head: pass\n")
    with pytest.raises(ValueError, match="no `# expect:` line"):
        catalogue.answers("head", tmp_path)
    path.write_text("# expect: shapes=1\n# why: x\n# fails: shapes not_a_kind: words\nclass Head: pass\n")
    with pytest.raises(ValueError):
        catalogue.answers("head", tmp_path)
    path.write_text("# expect: shapes=0 causal=1\n# why: crash: x\n# fails: shapes unanswered: still: unanswered\n"
                    "# says: words\n# a comment of the answer: kept\nclass Head: pass\n")
    a = catalogue.answer("head", "01_x", tmp_path)
    assert (a.expect, a.sort, a.plain, a.validate_says) == ({"shapes": 0.0, "causal": 1.0}, "crash", False, "words")
    assert a.fails == (catalogue.Fails("shapes", Kind.UNANSWERED, "still: unanswered"),)
    assert a.code == "# a comment of the answer: kept\nclass Head: pass"
