"""hub/systemd/: the hub's and the proxy's systemd units pass `systemd-analyze verify` (with this
checkout and venv in place of /opt/tinygpt-course and /opt/tinygpt-venv, which verify checks
exist), and a broken unit does not; the hub's unit stops the hub alone (KillMode=process), so a
restart keeps the servers it started. The restart itself is run live in tests/test_hub.py."""
import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tinygpt_course.testing.course import REPO
from tinygpt_course.testing.hub import ci

UNITS = sorted((REPO / "hub" / "systemd").glob("*.service"))
VENV = Path(sys.prefix)


def _verify(folder):
    return subprocess.run(["systemd-analyze", "verify", *map(str, sorted(folder.glob("*.service")))],
                          capture_output=True, text=True)


def _install(tmp_path, text_of=lambda text: text):
    for unit in UNITS:
        text = unit.read_text().replace("/opt/tinygpt-venv", str(VENV)).replace("/opt/tinygpt-course", str(REPO))
        (tmp_path / unit.name).write_text(text_of(text))
    return tmp_path


@pytest.fixture
def analyze():
    if not shutil.which("systemd-analyze"):
        if ci():
            pytest.fail("systemd-analyze is missing (course.sh setup_system installs systemd's package)")
        pytest.skip("systemd-analyze is missing (apt-get install systemd)")


def test_the_units_verify(tmp_path, analyze):
    assert {u.name for u in UNITS} == {"tinygpt-hub.service", "tinygpt-proxy.service"}
    r = _verify(_install(tmp_path))
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr


def test_a_broken_unit_does_not_verify(tmp_path, analyze):
    r = _verify(_install(tmp_path, lambda t: t.replace("KillMode=process", "KillMode=sometimes")
                         .replace(f"{VENV}/bin/python", "/nonexistent/python")))
    assert r.returncode != 0 and "not executable" in r.stderr and "kill mode" in r.stderr.lower(), r.stderr


def test_the_hub_unit_stops_the_hub_alone():
    units = {}
    for unit in UNITS:
        cp = configparser.ConfigParser(strict=False, interpolation=None)
        cp.read_string(unit.read_text())
        units[unit.name] = cp
    hub = units["tinygpt-hub.service"]["Service"]
    assert hub["KillMode"] == "process"
    assert "hub/jupyterhub_config.py" in hub["ExecStart"]
    assert "hub/proxy.py" in units["tinygpt-proxy.service"]["Service"]["ExecStart"]
    assert "tinygpt-proxy.service" in units["tinygpt-hub.service"]["Unit"]["After"]


def _environment_file():
    files = set()
    for unit in UNITS:
        cp = configparser.ConfigParser(strict=False, interpolation=None)
        cp.read_string(unit.read_text())
        files.add(cp["Service"]["EnvironmentFile"])
    (path,) = files                      # both units read one file
    return path


def test_by_hand_the_hub_reads_the_units_settings():
    """hub/README's route by hand sources the file the units read (/etc, copied there once), not the
    checkout's copy: a setting changed for one holds for the other, and never edits the checkout."""
    path = _environment_file()
    assert path.startswith("/etc/")
    readme = (REPO / "hub" / "README.md").read_text()
    machine = readme[readme.index("## One machine"):readme.index("**Restarts keep servers.**")]
    assert f"cp /opt/tinygpt-course/hub/systemd/{Path(path).name} /etc/" in machine
    assert f"set -a && . {path} && set +a" in machine
    assert ". /opt/tinygpt-course/hub/systemd/" not in machine, "the route by hand sources the checkout's copy"


def test_every_setting_in_the_environment_file_is_one_the_hub_or_proxy_reads():
    names = {line.split("=", 1)[0] for line in (REPO / "hub" / "systemd" / "tinygpt-hub.env").read_text().splitlines()
             if line and not line.startswith("#")}
    documented = (REPO / "hub" / "jupyterhub_config.py").read_text() + (REPO / "hub" / "proxy.py").read_text()
    assert {n for n in names if n.startswith("TINYGPT_") and f"{n} " not in documented} == set()
