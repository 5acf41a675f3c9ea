"""Resolve the course's pins for every Python and platform it supports, with pip's own resolver,
binary wheels only, and write what pip chose to scripts/resolved_pins.json (generated; committed).

    python scripts/resolve_pins.py           resolve all of them (needs PyPI) and write the file
    python scripts/resolve_pins.py --out F   write F instead (tests/test_env_pins.py, live: --jobs 9)

The question each resolution answers: on that machine, with that Python, does
`pip install` of the pins (pyproject.toml's dependencies and its hub and test extras, the one list)
find a wheel of every package, the pinned versions and all they pull in, without building
anything? PYTHONS x PLATFORMS: 3.11, 3.12 and 3.13 on Linux x86-64, Linux aarch64 and macOS
on Apple silicon, nine resolutions.

pip resolves for another Python and platform with --python-version, --platform and
--only-binary=:all:, which choose the wheels; but it evaluates environment markers
(`nvidia-cublas ; platform_system == "Linux"`) for the machine it runs on, and would ask for
torch's NVIDIA packages on macOS. So each resolution runs pip in a child whose marker
environment is the target machine's (packaging's default_environment, which pip asks, answers
for the target): what pip on that machine would pick.

PyPI only, never this machine's pip configuration (a local wheel folder, a constraints file):
PIP_CONFIG_FILE=/dev/null and no PIP_* variable but the certificate and proxy ones. On Linux,
PyPI's torch==2.13.0 is the CUDA build, so the Linux resolutions list its nvidia-* packages;
course.sh installs the CPU build from PyTorch's own index where that can be reached. Either way
the point holds: a wheel exists for every Python and platform.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "scripts" / "resolved_pins.json"
INDEX = "https://pypi.org/simple"
PYTHONS = ("3.11", "3.12", "3.13")


def _manylinux(arch, newest=28):
    """The wheel tags a Linux with glibc 2.`newest` takes (torch 2.13's wheels are manylinux_2_28)."""
    legacy = ["manylinux2014", "manylinux2010", "manylinux1"] if arch == "x86_64" else ["manylinux2014"]
    return [f"manylinux_2_{minor}_{arch}" for minor in range(newest, 16, -1)] + [f"{t}_{arch}" for t in legacy]


# name: (wheel platform tags pip is given, the marker environment of that machine). macOS 14:
# torch 2.13's macOS wheels are macosx_14_0_arm64 (pip adds the older macosx_* and universal2 tags).
PLATFORMS = {
    "linux-x86_64": (_manylinux("x86_64"),
                     {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64"}),
    "linux-aarch64": (_manylinux("aarch64"),
                      {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "aarch64"}),
    "macos-arm64": (["macosx_14_0_arm64"],
                    {"sys_platform": "darwin", "platform_system": "Darwin", "platform_machine": "arm64"}),
}

# run in the child: pip's main, its marker environment the target's (argv[1], JSON)
_CHILD = """
import json, sys
from pip._vendor.packaging import markers
target, host = json.loads(sys.argv[1]), markers.default_environment
markers.default_environment = lambda: {**host(), **target}
from pip._internal.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def requirements(pyproject=REPO / "pyproject.toml"):
    """The pins, sorted: the dependencies and the hub and test extras (the course itself, named in
    the test extra for its hub extra, left out). The data extra is a developer's, unpinned."""
    meta = tomllib.loads(Path(pyproject).read_text())["project"]
    extras = meta["optional-dependencies"]
    specs = meta["dependencies"] + extras["hub"] + extras["test"]
    return sorted(s for s in specs if not re.match(r"tinygpt-course\b", s))


def requires_python(pyproject=REPO / "pyproject.toml"):
    return tomllib.loads(Path(pyproject).read_text())["project"]["requires-python"]


def pip_env():
    """This process's environment without pip's own settings (a wheel folder, an index, a cap),
    but with its certificate and proxies, so that pip asks PyPI as any learner's pip would."""
    keep = {"PIP_CERT", "PIP_PROXY", "PIP_DEFAULT_TIMEOUT"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in keep}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def resolve(python, platform, reqs, index=INDEX, pip_python=sys.executable):
    """{name: "version wheel-file"} of what pip would install, or raises RuntimeError with pip's words."""
    tags, markers = PLATFORMS[platform]
    target = {**markers, "python_version": python, "python_full_version": f"{python}.0",
              "implementation_version": f"{python}.0", "implementation_name": "cpython",
              "platform_python_implementation": "CPython", "os_name": "posix"}
    with tempfile.TemporaryDirectory(prefix="resolve-pins-") as tmp:
        report = Path(tmp) / "report.json"
        cmd = [pip_python, "-c", _CHILD, json.dumps(target),
               "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
               "--index-url", index, "--only-binary=:all:", "--python-version", python,
               "--implementation", "cp", *[f"--platform={t}" for t in tags], "--target", f"{tmp}/target", *reqs]
        r = subprocess.run(cmd, capture_output=True, text=True, env=pip_env(), timeout=900)
        if r.returncode != 0:
            raise RuntimeError(f"pip found no complete set of wheels for Python {python} on {platform}:\n"
                               f"{r.stderr[-3000:]}")
        installed = json.loads(report.read_text())["install"]
    return {i["metadata"]["name"].lower().replace("_", "-"):
            f'{i["metadata"]["version"]} {i["download_info"]["url"].rsplit("/", 1)[1]}'
            for i in sorted(installed, key=lambda i: i["metadata"]["name"].lower())}


def resolve_all(reqs, index=INDEX, jobs=3):
    """Every (python, platform) resolution, as the file holds them."""
    combos = [(py, plat) for plat in PLATFORMS for py in PYTHONS]
    with ThreadPoolExecutor(jobs) as pool:    # pip waits on the network, mostly
        found = list(pool.map(lambda c: resolve(*c, reqs, index), combos))
    return [{"python": py, "platform": plat, "packages": pkgs} for (py, plat), pkgs in zip(combos, found)]


def pip_version(pip_python=sys.executable):
    return subprocess.run([pip_python, "-m", "pip", "--version"], capture_output=True, text=True,
                          env=pip_env(), check=True).stdout.split()[1]


def render(lock):
    """The file's text: one package a line, so that a new resolution's diff reads package by package."""
    return json.dumps(lock, indent=1, sort_keys=False) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--index-url", default=INDEX, help="a PyPI mirror, if PyPI itself cannot be reached")
    parser.add_argument("--jobs", type=int, default=3, help="resolutions at a time (pip mostly waits on the network)")
    args = parser.parse_args(argv)
    reqs = requirements()
    lock = {"generated_by": "scripts/resolve_pins.py (do not edit: run it again after changing a pin)",
            "pip": pip_version(), "index": args.index_url, "requires_python": requires_python(),
            "requirements": reqs, "resolutions": resolve_all(reqs, args.index_url, args.jobs)}
    args.out.write_text(render(lock))
    for res in lock["resolutions"]:
        print(f"Python {res['python']} on {res['platform']}: {len(res['packages'])} wheels")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
