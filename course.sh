#!/usr/bin/env bash
# One entry point for the course. On a fresh machine:
#   bash course.sh lab    set up .venv and open JupyterLab, as a learner, on notebooks/START.md
#   bash course.sh teach  the same JupyterLab with nbgrader's teacher tools (Formgrader, Create Assignment)
#   bash course.sh test   set up everything the tests need, then run the whole test suite
#                         (and the lessons' number tests again on torch's default CPU kernels)
#   bash course.sh setup  only set up .venv (add "test" for the test tools)
#   bash course.sh python the Python a new .venv would be made from (3.11-3.13: PYTHONS below)
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

# The Pythons course.sh takes, newest first: scripts/resolve_pins.py finds a wheel of every pin for
# each (scripts/resolved_pins.json); pyproject.toml's requires-python and environment.yml say the
# same (tests/test_env_pins.py checks they agree)
PYTHONS=(3.13 3.12 3.11)
SYSTEM_BIN=${TINYGPT_SYSTEM_BIN:-/usr/bin}   # where the system's Pythons are (tests: another folder)

version_of() {  # "3.X" of a Python that works, or nothing
    "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true
}

takes() {  # $1: "3.X"; true if course.sh takes it
    local v
    for v in "${PYTHONS[@]}"; do [ "$1" = "$v" ] && return 0; done
    return 1
}

python_for_venv() {  # the Python a new venv is made from (TINYGPT_PYTHON: this one, if course.sh takes it)
    # A system Python first, the newest: every user can read it, and so the venv made from it (a
    # hub's learners use that venv; pyenv's Pythons live in their owner's home, here under /root).
    # Then the newest on PATH (Homebrew, python.org's installer, an activated pyenv or conda).
    local candidates=() found=() py v
    if [ -n "${TINYGPT_PYTHON:-}" ]; then
        candidates=("$TINYGPT_PYTHON")
    else
        for v in "${PYTHONS[@]}"; do candidates+=("$SYSTEM_BIN/python$v"); done
        candidates+=("$SYSTEM_BIN/python3")
        for v in "${PYTHONS[@]}"; do candidates+=("python$v"); done
        candidates+=(python3)
    fi
    for py in "${candidates[@]}"; do
        command -v "$py" >/dev/null || continue
        v=$(version_of "$py")
        if [ -z "$v" ]; then found+=("$py does not run"); continue; fi
        if ! takes "$v"; then found+=("$py is $v"); continue; fi
        # venv and ensurepip: Debian and Ubuntu ship them apart (python3.X-venv)
        if ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then
            found+=("$py ($v) has no venv: apt-get install python$v-venv"); continue
        fi
        command -v "$py"; return      # its path, to say which
    done
    echo "course.sh: Python ${PYTHONS[*]} (any of them) with venv is needed." >&2
    [ ${#found[@]} -eq 0 ] || printf '  found: %s\n' "${found[@]}" >&2
    echo "  Debian/Ubuntu: apt-get install python3-venv; macOS: brew install python@${PYTHONS[0]}," \
         "or python.org's installer (README.md, \"Your own machine\")" >&2
    exit 1
}

torch_index_args() {
    # Ask PyTorch's CPU index too where it can be reached; where it cannot (a mirror, a closed
    # network), the configured index alone: the build is reported after installing either way.
    local py
    py=$(python_for_venv)
    if "$py" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/torch/", timeout=8)' \
            "$TORCH_CPU_INDEX" 2>/dev/null; then
        echo "--extra-index-url=$TORCH_CPU_INDEX"
    else
        echo "== $TORCH_CPU_INDEX cannot be reached: torch from the configured package index only" >&2
    fi
}

setup_venv() {  # $1: pip extras, e.g. "" or "[test]"; $2: "copy" installs a copy, not editable
    local py
    if [ ! -x "$VENV/bin/python" ]; then
        py=$(python_for_venv)
        echo "== creating $VENV with $py (Python $(version_of "$py"); course.sh takes ${PYTHONS[*]})"
        "$py" -m venv "$VENV"
    fi
    if ! takes "$(version_of "$VENV/bin/python")"; then
        echo "course.sh: $VENV is Python $(version_of "$VENV/bin/python"); course.sh takes ${PYTHONS[*]}: remove it and run again" >&2
        exit 1
    fi
    echo "== $VENV: Python $("$VENV/bin/python" -c 'import platform; print(platform.python_version())')"
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
    # the course's JupyterLab extension (hub/labextension/): nbgrader's "view feedback" opens the
    # feedback, not only its folder; the hint rungs used are kept in the notebook's metadata on save
    mkdir -p "$VENV/share/jupyter/labextensions"
    rm -rf "$VENV/share/jupyter/labextensions/tinygpt-feedback"
    cp -R hub/labextension/tinygpt-feedback "$VENV/share/jupyter/labextensions/"
    # the learner's and the teacher's Jupyter config (hub/roles.py: the same roles as on the hub)
    "$VENV/bin/python" hub/roles.py local "$VENV/etc/tinygpt"
    # the hub's students read the venv whatever the checkout's mode (hub/README: a private
    # checkout) and the umask: last, after everything above was copied or written into it
    if [ "${2:-}" = copy ]; then chmod -R a+rX "$VENV"; fi
}

missing_system() {  # the Debian packages of the tools the tests and the grader need that are missing
    local missing=()
    [ -x /usr/bin/chromium ] || missing+=(chromium)           # the browser tests
    [ -x /usr/bin/bwrap ] || missing+=(bubblewrap)            # the grading sandbox
    command -v prlimit >/dev/null || missing+=(util-linux)    # its caps
    command -v newuidmap >/dev/null || missing+=(uidmap)      # its subordinate uid, for a grader that is not root
    command -v systemd-analyze >/dev/null || missing+=(systemd)   # checks hub/systemd/ (verify only)
    # npm only where it is missing: where Node.js comes from NodeSource, npm is part of it and
    # Debian's npm package conflicts with it
    command -v npm >/dev/null || missing+=(npm)
    echo "${missing[*]}"
}

setup_system() {  # what the tests need from outside PyPI (run as root, e.g. in CI)
    local missing
    read -r -a missing <<< "$(missing_system)"
    if ! command -v apt-get >/dev/null; then
        # macOS, or a Linux of another family: nothing is installed system-wide; the tests that
        # need what is missing say so and are skipped (the grading sandbox is Linux's bubblewrap)
        local skipped=""
        [ ${#missing[@]} -eq 0 ] || skipped="; skipped: ${missing[*]} (as Debian names them)"
        echo "== no apt-get here: installing nothing system-wide$skipped"
        command -v configurable-http-proxy >/dev/null || echo "== skipped: npm install -g configurable-http-proxy (the hub tests)"
        return 0
    fi
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

note_system() {  # lab and teach: they install nothing outside the venv; say what a grader would need
    local missing
    missing=$(missing_system)
    [ -z "$missing" ] || echo "== nothing installed system-wide (not needed to learn): skipped $missing," \
        "the tests' and the grader's (grading runs in Linux's bubblewrap; README.md, \"The grading sandbox\")"
}

other_pythons() {  # "path version" of each other Python course.sh takes that this machine has, one a version
    local main py v seen=" "
    main=$(version_of "$VENV/bin/python")
    # TINYGPT_TEST_PYTHONS: interpreters to use as well (paths, e.g. pyenv's), before the ones found
    # shellcheck disable=SC2086  # a list of paths
    for py in ${TINYGPT_TEST_PYTHONS:-} $(for v in "${PYTHONS[@]}"; do echo "$SYSTEM_BIN/python$v python$v"; done); do
        command -v "$py" >/dev/null || continue
        v=$(version_of "$py")
        if [ -z "$v" ] || [ "$v" = "$main" ] || ! takes "$v" || [[ "$seen" == *" $v "* ]]; then continue; fi
        "$py" -c 'import venv, ensurepip' 2>/dev/null || continue
        seen+="$v "
        echo "$py $v"
    done
}

run_lab() {  # $1: student or teacher; then JupyterLab's own options
    local role=$1; shift
    export PATH="$VENV/bin:$PATH"
    export JUPYTER_CONFIG_PATH="$VENV/etc/tinygpt/$role:$VENV/etc/tinygpt/common"
    extra=(); [ "$(id -u)" = 0 ] && extra+=(--allow-root)
    # ${extra[@]+...}: macOS's bash 3.2 calls an empty array unbound under set -u
    exec jupyter lab ${extra[@]+"${extra[@]}"} --ServerApp.root_dir="$ROOT" --LabApp.default_url="/lab/tree/$START_PAGE" "$@"
}

case "${1:-lab}" in
    setup)
        if [ "${2:-}" = hub ]; then setup_venv "[hub]" copy; else setup_venv "${2:+[$2]}"; fi ;;
    lab)      # learners: nbgrader's teacher extensions off (Assignment List and Validate stay)
        shift || true
        setup_venv ""
        note_system
        run_lab student "$@" ;;
    teach)    # teachers: the Formgrader and Create Assignment, on this repo's nbgrader_config.py
        shift || true
        setup_venv ""
        note_system
        run_lab teacher "$@" ;;
    python)   # which Python setup would make a new venv from, or why none (tests/test_course_python.py)
        py=$(python_for_venv)
        echo "$py (Python $(version_of "$py"); course.sh takes ${PYTHONS[*]})" ;;
    torch-index)   # the index option setup adds for torch, if any (tests/test_run_command.py)
        torch_index_args ;;
    test)
        setup_system
        setup_venv "[test]"
        export PATH="$VENV/bin:$PATH"
        shift || true
        [ $# -gt 0 ] && exec python -m pytest "$@"
        # The whole suite on this CPU's own kernels. Beside it, in a process of its own (its
        # report printed after the suite's), the lessons'
        # printouts, stored records and checks again on torch's plainest kernels, as another CPU
        # (another x86, an ARM Mac) would round them: float32 sums in another order must print and
        # judge the same. The suite runs its modules $TINYGPT_TEST_WORKERS (2) at a time, then
        # those that watch the whole machine or make Unix users alone (tests/conftest.py ALONE).
        status=0 aten_status=0
        aten_log=$(mktemp) aten_tmp=$(mktemp -d)
        ( export ATEN_CPU_CAPABILITY=default
          echo "== again on torch's $(python -c 'import torch; print(torch.backends.cpu.get_cpu_capability())') CPU kernels: ${CPU_TESTS[*]}"
          exec python -m pytest --basetemp "$aten_tmp/t" "${CPU_TESTS[@]}" ) </dev/null >"$aten_log" 2>&1 &
        aten=$!
        # the hub's users' venv (course.sh setup hub, minutes) made meanwhile for the second part
        # (tests/conftest.py users_venv), unless one is given
        users=""
        if [ -z "${TINYGPT_HUB_TEST_VENV:-}" ] && [ "$(id -u)" = 0 ]; then
            users=$(mktemp -d /var/tmp/tinygpt-venv-XXXXXX); chmod 755 "$users"
            python -m tinygpt_course.testing.hub make-venv "$users" </dev/null >"$users/made.log" 2>&1 &
            users_pid=$!
        fi
        echo "== the suite, ${TINYGPT_TEST_WORKERS:-2} modules at a time (torch's plainest kernels beside it: $aten_log)"
        python -m pytest -n "${TINYGPT_TEST_WORKERS:-2}" --dist loadfile -m "not alone" || status=$?
        echo "== the tests that watch the whole machine or make Unix users, one at a time"
        if [ -n "$users" ]; then
            if wait $users_pid; then export TINYGPT_HUB_TEST_VENV="$users/venv"
            else echo "== the users' venv failed (the tests make their own): $(tail -3 "$users/made.log")"; fi
        fi
        python -m pytest -m alone || status=$?
        [ -z "$users" ] || rm -rf "$users"
        wait $aten || aten_status=$?
        cat "$aten_log"; rm -rf "$aten_log" "$aten_tmp"
        [ $aten_status -eq 0 ] || status=$aten_status
        # The lessons' and checks' tests again under every other Python course.sh takes that this
        # machine has (Debian 13: 3.13 beside 3.11), each in a venv of its own (README.md says
        # which versions were run and which only resolved), on this CPU's own kernels
        while read -r py v; do
            [ -n "$py" ] || continue
            echo "== again under Python $v ($py): ${CPU_TESTS[*]}"
            ( VENV="$VENV/py$v"; TINYGPT_PYTHON=$py; unset ATEN_CPU_CAPABILITY
              setup_venv "[test]"
              "$VENV/bin/python" -m pytest "${CPU_TESTS[@]}" ) </dev/null || status=$?
        done <<< "$(other_pythons)"
        exit $status ;;
    *)
        sed -n '2,8p' "$0"; exit 2 ;;
esac
