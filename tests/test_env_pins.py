"""The one list of pins (pyproject.toml) and every place that repeats it or depends on it agree:
environment.yml (the pins and the Python range), course.sh's Pythons, and scripts/resolved_pins.json,
pip's resolution of the pins for Python 3.11 to 3.13 on Linux x86-64, Linux aarch64 and macOS
arm64, binary wheels only (scripts/resolve_pins.py). Offline here; the slow test resolves again
on PyPI where it answers."""
import json
import re
import tomllib
import urllib.request

import pytest
from packaging import tags
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename

from tinygpt_course.testing.course import load_script, REPO


def load_resolver():
    return load_script(REPO / "scripts" / "resolve_pins.py", "resolve_pins")


resolver = load_resolver()
LOCK = json.loads((REPO / "scripts" / "resolved_pins.json").read_text())


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


def taken(spec, candidates=("3.9", "3.10", "3.11", "3.12", "3.13", "3.14", "3.15")):
    """The Python versions (3.X) a requires-python-like specifier admits."""
    return tuple(v for v in candidates if SpecifierSet(spec).contains(f"{v}.0"))


def test_every_runtime_dependency_is_pinned_exactly():
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert all("==" in d for d in deps), deps
    assert pins_pyproject()["torch"] == "2.13.0"


def test_environment_yml_agrees_with_pyproject():
    assert pins_environment() == pins_pyproject()


def test_the_pythons_agree_everywhere():
    """pyproject.toml's requires-python, environment.yml's python, course.sh's PYTHONS and the
    resolver's PYTHONS name the same versions."""
    ours = tuple(sorted(resolver.PYTHONS))
    assert taken(resolver.requires_python()) == ours
    conda = re.search(r"^\s*-\s*python\s*([<>=!,.0-9 ]+?)\s*$", (REPO / "environment.yml").read_text(), re.M)
    assert conda, "environment.yml names no python"
    assert taken(conda.group(1).replace(" ", "")) == ours, conda.group(0)
    course_sh = re.search(r"^PYTHONS=\(([^)]*)\)", (REPO / "course.sh").read_text(), re.M)
    assert tuple(sorted(course_sh.group(1).split())) == ours


def test_taken_reads_a_range():
    """taken() is what the test above compares: it must see a range that leaves a version out."""
    assert taken(">=3.11,<3.14") == ("3.11", "3.12", "3.13")
    assert taken("==3.11.*") == ("3.11",)
    assert taken(">=3.11,<3.13") != ("3.11", "3.12", "3.13")


def wheel_fits(filename, python, platform):
    """True if pip on `platform` with CPython `python` could install this wheel (packaging's tags,
    as pip computes them; macOS 14 and glibc 2.28, as the resolver asks)."""
    version = tuple(int(p) for p in python.split("."))
    plats = resolver.PLATFORMS[platform][0]
    if platform.startswith("macos"):
        plats = list(tags.mac_platforms((14, 0), "arm64"))
    supported = set(tags.cpython_tags(version, platforms=plats))
    supported |= set(tags.compatible_tags(version, f"cp{version[0]}{version[1]}", platforms=plats))
    return bool(set(parse_wheel_filename(filename)[3]) & supported)


def check_resolutions(resolutions, reqs):
    """What must hold of every resolution: the nine (python, platform) pairs, each with every pin
    at its pinned version and nothing but wheels that fit that Python and platform."""
    pairs = sorted((r["python"], r["platform"]) for r in resolutions)
    every = sorted((py, plat) for py in resolver.PYTHONS for plat in resolver.PLATFORMS)
    problems = [] if pairs == every else [f"resolved for {pairs}, not for each of {every}"]
    wanted = {canonicalize_name(n): v for n, v in (re.match(r"([A-Za-z0-9_.-]+)==(\S+)$", r).groups() for r in reqs)}
    for res in resolutions:
        where = f"Python {res['python']} on {res['platform']}"
        got = {canonicalize_name(n): v.split()[0] for n, v in res["packages"].items()}
        problems += [f"{where}: {n} is {got.get(n)}, pinned {v}" for n, v in wanted.items() if got.get(n) != v]
        for name, entry in res["packages"].items():
            version, filename = entry.split()
            if not filename.endswith(".whl") or not wheel_fits(filename, res["python"], res["platform"]):
                problems.append(f"{where}: {filename} is no wheel for it")
    return problems


def test_the_committed_resolution_is_of_the_current_pins():
    """scripts/resolved_pins.json was made from pyproject.toml as it is now: a pin changed without
    resolving again fails here (run `python scripts/resolve_pins.py`)."""
    assert LOCK["requirements"] == resolver.requirements(), "pins changed: run python scripts/resolve_pins.py"
    assert LOCK["requires_python"] == resolver.requires_python()
    assert set(pins_pyproject().items()) <= {tuple(r.split("==")) for r in LOCK["requirements"]}


def test_the_committed_resolution_covers_every_python_and_platform_with_wheels():
    assert check_resolutions(LOCK["resolutions"], LOCK["requirements"]) == []
    # torch from PyPI on Linux is the CUDA build: its NVIDIA packages are in the Linux resolutions only
    for res in LOCK["resolutions"]:
        nvidia = [n for n in res["packages"] if n.startswith("nvidia-")]
        assert bool(nvidia) == res["platform"].startswith("linux"), (res["python"], res["platform"], nvidia)


def test_the_check_fails_for_what_it_names():
    """check_resolutions is the defence: it must fail for a missing pair, a pin at another version,
    and a wheel of another Python or platform."""
    reqs, good = LOCK["requirements"], LOCK["resolutions"]
    assert check_resolutions(good[1:], reqs), "a missing (python, platform) pair went unnoticed"
    moved = json.loads(json.dumps(good))
    moved[0]["packages"]["numpy"] = "1.26.4 " + moved[0]["packages"]["numpy"].split()[1]
    assert any("numpy is 1.26.4" in p for p in check_resolutions(moved, reqs))
    for swap in (("cp311", "cp310"), ("manylinux_2_28_x86_64", "macosx_14_0_arm64")):
        wrong = json.loads(json.dumps(good))
        first = next(r for r in wrong if r["python"] == "3.11" and r["platform"] == "linux-x86_64")
        first["packages"]["torch"] = first["packages"]["torch"].replace(*swap)
        assert any("torch-2.13.0" in p for p in check_resolutions(wrong, reqs)), swap


def pypi_answers():
    try:
        urllib.request.urlopen(resolver.INDEX + "/pip/", timeout=10)
        return True
    except OSError:
        return False


@pytest.mark.slow
def test_pip_resolves_the_pins_again_on_pypi(tmp_path):
    """The nine resolutions again, live (2 min, all at once): the pins still resolve with binary wheels only
    (a release yanked, a wheel withdrawn). What pip takes beside the pins may have moved on since
    the committed file was made: printed, not failed."""
    if not pypi_answers():
        pytest.skip(f"{resolver.INDEX} cannot be reached")
    out = tmp_path / "resolved.json"
    resolver.main(["--out", str(out), "--jobs", "9"])
    fresh = json.loads(out.read_text())
    assert check_resolutions(fresh["resolutions"], fresh["requirements"]) == []
    old = {(r["python"], r["platform"]): r["packages"] for r in LOCK["resolutions"]}
    for res in fresh["resolutions"]:
        moved = sorted(set(res["packages"].items()) ^ set(old[(res["python"], res["platform"])].items()))
        if moved:
            print(f"Python {res['python']} on {res['platform']}: moved since the committed file: {moved[:10]}")
