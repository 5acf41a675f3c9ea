"""Which Python `course.sh` makes a venv from (`bash course.sh python` says it, setup uses it):
the newest of 3.11-3.13 it finds, a system one first, and a refusal naming the versions it takes
otherwise. Real interpreters (this machine's pyenv ones, reached through a folder of links on
PATH); a folder stands for /usr/bin (TINYGPT_SYSTEM_BIN)."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tinygpt_course.testing.course import REPO

PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"


def interpreter(version):
    """A real python3.X of this machine (the system's or pyenv's), or None."""
    for path in [Path(f"/usr/bin/python{version}"), *sorted(PYENV.glob(f"{version}.*/bin/python{version}"))]:
        if path.exists() and subprocess.run([path, "-c", "import venv, ensurepip"]).returncode == 0:
            return path
    return None


def need(*versions):
    found = {v: interpreter(v) for v in versions}
    missing = [v for v, p in found.items() if p is None]
    if missing:
        pytest.skip(f"no Python {', '.join(missing)} on this machine")
    return found


def course_python(tmp_path, system=(), on_path=(), **env):
    """`bash course.sh python` where the system's folder holds `system` and PATH holds `on_path`
    ((name, interpreter) pairs) and nothing else but dirname: (exit code, stdout, stderr)."""
    sys_bin, path_bin = tmp_path / "system", tmp_path / "path"
    for folder, links in ((sys_bin, system), (path_bin, on_path)):
        folder.mkdir()
        for name, target in links:
            (folder / name).symlink_to(target)
    (path_bin / "dirname").symlink_to(shutil.which("dirname"))
    r = subprocess.run(["/bin/bash", str(REPO / "course.sh"), "python"], capture_output=True, text=True,
                       env={"PATH": str(path_bin), "HOME": str(tmp_path), "TINYGPT_SYSTEM_BIN": str(sys_bin), **env})
    return r.returncode, r.stdout, r.stderr


def test_the_newest_on_path_when_the_system_has_none(tmp_path):
    py = need("3.11", "3.12", "3.13")
    code, out, err = course_python(tmp_path, on_path=[(f"python{v}", p) for v, p in py.items()])
    assert code == 0 and out.startswith(str(tmp_path / "path" / "python3.13")) and "(Python 3.13;" in out, out + err


def test_a_system_python_before_a_newer_one_on_path(tmp_path):
    py = need("3.11", "3.13")
    code, out, err = course_python(tmp_path, system=[("python3.11", py["3.11"]), ("python3", py["3.11"])],
                                   on_path=[("python3.13", py["3.13"])])
    assert code == 0 and out.startswith(str(tmp_path / "system" / "python3.11")), out + err


def test_any_other_version_is_refused_with_the_versions_taken(tmp_path):
    py = need("3.10")
    code, out, err = course_python(tmp_path, system=[("python3", py["3.10"])], on_path=[("python3", py["3.10"])])
    assert code != 0 and out == "", out
    assert "Python 3.13 3.12 3.11 (any of them) with venv is needed" in err, err
    assert re.search(r"found: \S*python3 is 3\.10", err), err


def test_tinygpt_python_chooses_one(tmp_path):
    py = need("3.11", "3.12")
    code, out, err = course_python(tmp_path, system=[("python3.11", py["3.11"])], TINYGPT_PYTHON=str(py["3.12"]))
    assert code == 0 and out.startswith(f"{py['3.12']} (Python 3.12;"), out + err


def course_functions(tmp_path, call, tools=("dirname", "id")):
    """`call` run in bash after course.sh's definitions (everything before its `case`), with a PATH
    of `tools` only and a stand-in npm that writes down that it was called: (exit code, output)."""
    path_bin = tmp_path / "path"
    path_bin.mkdir()
    for tool in tools:
        (path_bin / tool).symlink_to(shutil.which(tool))
    (path_bin / "npm").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'npm-called'}\n")
    (path_bin / "npm").chmod(0o755)
    text = (REPO / "course.sh").read_text()
    (tmp_path / "definitions.sh").write_text(text[:text.index("\ncase ")])
    script = f"source {tmp_path / 'definitions.sh'}\n{call}\n"
    r = subprocess.run(["/bin/bash", "-c", script], capture_output=True, text=True, cwd=REPO,
                       env={"PATH": str(path_bin), "HOME": str(tmp_path)})
    return r.returncode, r.stdout + r.stderr


def test_without_apt_get_nothing_is_installed_system_wide_and_what_was_skipped_is_said(tmp_path):
    code, out = course_functions(tmp_path, "setup_system; note_system")
    assert code == 0, out
    assert "no apt-get here: installing nothing system-wide; skipped: " in out and "uidmap" in out, out
    assert "skipped: npm install -g configurable-http-proxy" in out, out
    assert "nothing installed system-wide (not needed to learn): skipped " in out, out
    assert not (tmp_path / "npm-called").exists()          # npm is there, and was not asked


def test_with_apt_get_setup_system_installs(tmp_path):
    """The other side of the test above: where apt-get is (here a stand-in that writes down its
    arguments, as a user who is not root would not run it), setup_system asks it."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "apt-get").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'apt-called'}\n")
    (fake / "apt-get").chmod(0o755)
    code, out = course_functions(tmp_path, f"id() {{ echo 0; }}; PATH={fake}:$PATH; setup_system")
    assert code == 0, out
    assert "uidmap" in (tmp_path / "apt-called").read_text(), out
