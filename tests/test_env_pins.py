"""environment.yml repeats pyproject.toml's pins (the one list): they must agree."""
import re
import tomllib

from tinygpt_course.testing.course import REPO


def pins_pyproject():
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return dict(re.match(r"([A-Za-z0-9_.-]+)\s*==\s*(\S+)$", d).groups() for d in deps)


def pins_environment():
    pins = {}
    for line in (REPO / "environment.yml").read_text().splitlines():
        m = re.match(r"\s*-\s*([A-Za-z0-9_.-]+)==(\S+)\s*$", line)
        if m:
            pins[m.group(1)] = m.group(2)
    return pins


def test_every_runtime_dependency_is_pinned_exactly():
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert all("==" in d for d in deps), deps
    assert pins_pyproject()["torch"] == "2.13.0"


def test_environment_yml_agrees_with_pyproject():
    assert pins_environment() == pins_pyproject()
