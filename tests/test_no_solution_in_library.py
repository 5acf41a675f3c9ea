"""No solution in the library: what learners have installed (tinygpt_course, as text and as the
compiled modules Python runs) holds no line of any lesson's solution.

A solution's line is the code of each line between the source notebooks' solution markers,
comments stripped, 25 characters or more, and also its right-hand side (what follows `=` or
`return`), which is the answer without its name. Fragments the released notebook shows anyway
(the stub's comments name the layers to build) are not secrets. Compared with the blanks taken
out, so a message that re-spaces a line still counts.
"""
import json
import marshal
import re
import types
from pathlib import Path

import tinygpt_course
from tinygpt_course.testing.course import REPO

LIBRARY = Path(tinygpt_course.__file__).parent
MIN = 25
TEXT = (".py", ".toml", ".txt", ".json", ".md", ".html", ".css", ".js")


def squash(text):
    return re.sub(r"\s+", "", text)


def cells(folder):
    for path in sorted((REPO / folder).rglob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            yield "".join(cell["source"])


def secrets():
    released = squash("\n".join(cells("release")))
    found = set()
    for source in cells("source"):
        for block in re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", source, re.S):
            for line in block.splitlines():
                code = re.sub(r"\s+#.*$", "", line).strip()
                for piece in (code, code.split(" = ", 1)[-1], re.sub(r"^return\s+", "", code)):
                    if len(piece) >= MIN and squash(piece) not in released:
                        found.add(squash(piece))
    return found


def strings(code):
    """Every string constant of a code object and the code objects it holds."""
    for const in code.co_consts:
        if isinstance(const, str):
            yield const
        elif isinstance(const, types.CodeType):
            yield from strings(const)


def library_texts(root=LIBRARY):
    """(where, text) for every file of the library and every string its compiled modules hold."""
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        if path.suffix in TEXT:
            yield str(path), path.read_text(errors="replace")
        if path.suffix == ".py":
            yield f"{path} (compiled)", "\n".join(strings(compile(path.read_text(), str(path), "exec")))
        if path.suffix == ".pyc":
            try:
                code = marshal.loads(path.read_bytes()[16:])
            except (ValueError, EOFError, TypeError):
                continue
            yield str(path), "\n".join(strings(code))


def leaks(root=LIBRARY):
    secret = secrets()
    return [(where, s) for where, text in library_texts(root) for s in secret if s in squash(text)]


def test_the_solutions_have_lines_to_look_for():
    assert len(secrets()) >= 20


def test_no_line_of_a_solution_is_in_the_library():
    found = leaks()
    assert not found, found


def test_the_search_finds_a_line_put_there(tmp_path):
    """The test can fail: a module holding a solution's line, as a message would quote it, is
    found in its text, in its compiled strings and in its .pyc."""
    import py_compile
    line = sorted(secrets())[0]
    planted = tmp_path / "planted.py"
    planted.write_text(f"MESSAGE = {line!r}\n")
    py_compile.compile(str(planted), cfile=str(tmp_path / "planted.pyc"))
    assert sorted(where.rsplit("/", 1)[-1] for where, s in leaks(tmp_path)) == \
        ["planted.py", "planted.py (compiled)", "planted.pyc"]
