"""tinygpt_course/grading/launch.py, the first step of every sandbox (run as ``python -I -S
launch.py SPEC``, twice a graded submission): it reads its JSON spec with the standard library's
C scanner instead of importing json, and imports ctypes and subprocess only for the steps that
need them, so that a sandbox's start costs Python's own start and little more."""
import json
import math
import os
import subprocess
import sys

import pytest

from tinygpt_course.grading import launch
from tinygpt_course.grading.sandbox import LAUNCH, Sandbox

HEAVY = ("json", "re", "ctypes", "subprocess")     # what the spec of a plain sandbox does not need


@pytest.mark.parametrize("value", [
    {"argv": ["/usr/bin/bwrap", "--", "sh", "-c", 'echo "ready"; exec "$@"'], "files": ["{\"a\": 1}\n"],
     "seccomp": None, "limits": {"as": 2 ** 33, "nproc": 64}, "limits_first": False, "cgroups": [],
     "uid": 65534, "subordinate": None, "stage": [], "stage_dir": "/mnt"},
    [1, -2, 3.5, 1e300, -0.0, True, False, None, "", "\u00e9\u4e2d\U0001f600\t\n\\\"", [], {}],
    {"nan": math.nan, "inf": math.inf, "ninf": -math.inf},
    "text", 12, None,
])
def test_parse_reads_what_json_dumps_writes(value):
    text = json.dumps(value)
    got = launch.parse(f" \n{text}\t ")
    assert json.dumps(got) == text
    assert type(got) is type(value)


def test_parse_reads_the_spec_sandbox_wrap_makes():
    cmd = Sandbox().wrap(["/bin/true"], files={"/tmp/k/kernel.json": '{"key": "x"}'})
    assert cmd[:4] == [sys.executable, "-I", "-S", LAUNCH]
    assert launch.parse(cmd[-1]) == json.loads(cmd[-1])


@pytest.mark.parametrize("bad", ["", "  ", "{", '{"a": 1', "[1, 2", "1 2", '{"a": 1}}', "nul", "'x'"])
def test_parse_refuses_what_is_not_one_json_value(bad):
    with pytest.raises(ValueError):
        json.loads(bad)
    with pytest.raises(ValueError):
        launch.parse(bad)


def imported(script, spec):
    """The modules `python -I -S script SPEC` imports (its -X importtime lines), run as a
    sandbox's launch is; the spec's argv is /bin/true."""
    proc = subprocess.run([sys.executable, "-I", "-S", "-X", "importtime", str(script), json.dumps(spec)],
                          capture_output=True, text=True, timeout=60, env={"PATH": os.environ.get("PATH", "")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}


PLAIN = {"argv": ["/bin/true"], "files": ["data"], "limits": {"fsize": 2 ** 30}, "cgroups": []}


def test_a_plain_sandbox_start_imports_neither_json_nor_ctypes():
    names = imported(LAUNCH, PLAIN)
    assert "resource" in names          # it did run and import (the probe sees imports)
    assert not names & set(HEAVY), sorted(names & set(HEAVY))


def test_the_probe_sees_a_heavy_import_at_the_top(tmp_path):
    """The check above switched off: launch.py with `import json` at its top again."""
    source = open(LAUNCH).read()
    at = source.index("\nimport os\n")
    script = tmp_path / "launch.py"
    script.write_text(source[:at] + "\nimport json" + source[at:])
    assert {"json", "re"} <= imported(script, PLAIN)
