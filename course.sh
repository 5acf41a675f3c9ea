#!/usr/bin/env bash
# One entry point for the course. On a fresh machine:
#   bash course.sh lab    set up .venv and open JupyterLab, as a learner, on notebooks/START.md
#   bash course.sh teach  the same JupyterLab with nbgrader's teacher tools (Formgrader, Create Assignment)
#   bash course.sh test   set up everything the tests need, then run the whole test suite
#                         (and the lessons' number tests again on torch's default CPU kernels)
#   bash course.sh setup  only set up .venv (add "test" for the test tools)
#   TINYGPT_VENV=/opt/tinygpt-venv bash course.sh setup hub
#                         the venv of a classroom hub's users (hub/README.md): the course library
#                         installed, NOT editable (nothing in it points back into this checkout,
#                         which holds the solutions), with jupyterhub
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(pwd)
VENV=${TINYGPT_VENV:-$ROOT/.venv}
# torch's CPU build: PyPI's torch wheel for Linux is the CUDA build (+ ~17 NVIDIA packages, GBs).
# PyTorch's own CPU index serves "2.13.0+cpu", which pip prefers for torch==2.13.0 when it sees both.
TORCH_CPU_INDEX=${TINYGPT_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
START_PAGE=notebooks/START.md
# what `test` runs a second time on torch's default CPU kernels (the lessons' numbers)
CPU_TESTS=(tests/test_checks.py tests/test_checks_gpt.py tests/test_checks_head_block.py
           tests/test_catalogue_checks.py tests/test_lesson.py tests/test_lesson_gpt.py
           tests/test_lessons_head_block.py)

python_for_venv() {
    # Debian's python3 is readable by every user (hub learners too); pyenv's lives under /root.
    for py in /usr/bin/python3.11 /usr/bin/python3 python3.11 python3; do
        if command -v "$py" >/dev/null && "$py" -c 'import sys, venv; assert sys.version_info[:2] == (3, 11)' 2>/dev/null; then
            echo "$py"; return
        fi
    done
    echo "course.sh: Python 3.11 with venv is needed (apt-get install python3.11-venv)" >&2; exit 1
}

torch_index_args() {
    # Ask PyTorch's CPU index too where it can be reached; where it cannot (a mirror, a closed
    # network), the configured index alone: the build is reported after installing either way.
    if "$(python_for_venv)" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/torch/", timeout=8)' \
            "$TORCH_CPU_INDEX" 2>/dev/null; then
        echo "--extra-index-url=$TORCH_CPU_INDEX"
    else
        echo "== $TORCH_CPU_INDEX cannot be reached: torch from the configured package index only" >&2
    fi
}

setup_venv() {  # $1: pip extras, e.g. "" or "[test]"; $2: "copy" installs a copy, not editable
    if [ ! -x "$VENV/bin/python" ]; then
        echo "== creating $VENV"
        "$(python_for_venv)" -m venv "$VENV"
    fi
    echo "== installing the course library and its pinned dependencies"
    local index
    index=$(torch_index_args)
    if [ "${2:-}" = copy ]; then
        # the library alone, copied out of the checkout (pip would build inside it otherwise) and
        # installed as a plain package: the hub's students read the venv, never the checkout
        local src
        src=$(mktemp -d)
        cp pyproject.toml README.md "$src/"
        cp -R tinygpt_course "$src/"
        find "$src" \( -name __pycache__ -o -name '*.egg-info' \) -prune -exec rm -rf {} +
        # shellcheck disable=SC2086  # $index: one option or nothing
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check $index "$src$1" 2>&1 \
            | grep -v "is neither a file nor a directory" || true
        # the same version again after a `git pull`: replace the installed copy with this one
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$src" 2>&1 \
            | grep -v "is neither a file nor a directory" || true
        rm -rf "$src"
        # -I: not the checkout's tinygpt_course (python -c would put this folder first on sys.path)
        "$VENV/bin/python" -I -c 'import sys, tinygpt_course
assert tinygpt_course.__file__.startswith(sys.prefix), f"tinygpt_course from {tinygpt_course.__file__}, not the venv"
print("== the course library installed in", sys.prefix, "(not editable)")'
    else
        # shellcheck disable=SC2086  # $index: one option or nothing
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check $index -e ".$1" 2>&1 \
            | grep -v "is neither a file nor a directory" || true
    fi
    "$VENV/bin/python" -c 'import torch, nbgrader, tinygpt_course; assert torch.__version__.startswith("2.13.0"), torch.__version__'
    "$VENV/bin/python" -c '
import torch
cuda = torch.version.cuda
print("== torch", torch.__version__, "(CPU build)" if cuda is None else f"(CUDA {cuda} build: the CPU index was not used)")'
    # JupyterLab's news pop-up would cover the lesson: switch it off for this environment; save the
    # widgets' state into notebooks (the hint rungs used, tinygpt_course/checks/tutor.py)
    local settings="$VENV/share/jupyter/lab/settings"
    mkdir -p "$settings"
    echo '{"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false}, "@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": true}}' \
        > "$settings/overrides.json"
    # nbgrader's "view feedback" opens the feedback, not only its folder (hub/labextension/)
    mkdir -p "$VENV/share/jupyter/labextensions"
    rm -rf "$VENV/share/jupyter/labextensions/tinygpt-feedback"
    cp -R hub/labextension/tinygpt-feedback "$VENV/share/jupyter/labextensions/"
    # the learner's and the teacher's Jupyter config (hub/roles.py: the same roles as on the hub)
    "$VENV/bin/python" hub/roles.py local "$VENV/etc/tinygpt"
    # the hub's students read the venv whatever the checkout's mode (hub/README: a private
    # checkout) and the umask: last, after everything above was copied or written into it
    if [ "${2:-}" = copy ]; then chmod -R a+rX "$VENV"; fi
}

setup_system() {  # what the tests need from outside PyPI (run as root, e.g. in CI)
    local missing=()
    [ -x /usr/bin/chromium ] || missing+=(chromium)           # the browser tests
    [ -x /usr/bin/bwrap ] || missing+=(bubblewrap)            # the grading sandbox
    command -v prlimit >/dev/null || missing+=(util-linux)    # its caps
    command -v newuidmap >/dev/null || missing+=(uidmap)      # its subordinate uid, for a grader that is not root
    command -v systemd-analyze >/dev/null || missing+=(systemd)   # checks hub/systemd/ (verify only)
    # npm only where it is missing: where Node.js comes from NodeSource, npm is part of it and
    # Debian's npm package conflicts with it
    command -v npm >/dev/null || missing+=(npm)
    if [ ${#missing[@]} -gt 0 ]; then
        if [ "$(id -u)" = 0 ]; then
            echo "== apt-get install ${missing[*]}"
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
        else
            echo "course.sh: missing ${missing[*]}: install them (as root: apt-get install ${missing[*]})" >&2
        fi
    fi
    if ! command -v configurable-http-proxy >/dev/null && command -v npm >/dev/null; then
        echo "== npm install -g configurable-http-proxy"
        npm install -g --silent configurable-http-proxy@5.3.0 >/dev/null
    fi
}

run_lab() {  # $1: student or teacher; then JupyterLab's own options
    local role=$1; shift
    export PATH="$VENV/bin:$PATH"
    export JUPYTER_CONFIG_PATH="$VENV/etc/tinygpt/$role:$VENV/etc/tinygpt/common"
    extra=(); [ "$(id -u)" = 0 ] && extra+=(--allow-root)
    exec jupyter lab "${extra[@]}" --ServerApp.root_dir="$ROOT" --LabApp.default_url="/lab/tree/$START_PAGE" "$@"
}

case "${1:-lab}" in
    setup)
        if [ "${2:-}" = hub ]; then setup_venv "[hub]" copy; else setup_venv "${2:+[$2]}"; fi ;;
    lab)      # learners: nbgrader's teacher extensions off (Assignment List and Validate stay)
        shift || true
        setup_venv ""
        run_lab student "$@" ;;
    teach)    # teachers: the Formgrader and Create Assignment, on this repo's nbgrader_config.py
        shift || true
        setup_venv ""
        run_lab teacher "$@" ;;
    torch-index)   # the index option setup adds for torch, if any (tests/test_run_command.py)
        torch_index_args ;;
    test)
        setup_system
        setup_venv "[test]"
        export PATH="$VENV/bin:$PATH"
        shift || true
        [ $# -gt 0 ] && exec python -m pytest "$@"
        # The whole suite on this CPU's own kernels; then the lessons' printouts, stored records
        # and checks again on torch's plainest kernels, as another CPU (another x86, an ARM Mac)
        # would round them: float32 sums in another order must print and judge the same.
        status=0
        python -m pytest || status=$?
        export ATEN_CPU_CAPABILITY=default
        echo "== again on torch's $(python -c 'import torch; print(torch.backends.cpu.get_cpu_capability())') CPU kernels: ${CPU_TESTS[*]}"
        python -m pytest "${CPU_TESTS[@]}" || status=$?
        exit $status ;;
    *)
        sed -n '2,7p' "$0"; exit 2 ;;
esac
