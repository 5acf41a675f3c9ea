#!/usr/bin/env bash
# One entry point for the course. On a fresh machine:
#   bash course.sh lab    set up .venv and open JupyterLab on the multi-head attention lesson
#   bash course.sh test   set up everything the tests need, then run the whole test suite
#   bash course.sh setup  only set up .venv (add "test" for the test tools)
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(pwd)
VENV=${TINYGPT_VENV:-$ROOT/.venv}

python_for_venv() {
    # Debian's python3 is readable by every user (hub learners too); pyenv's lives under /root.
    for py in /usr/bin/python3.11 /usr/bin/python3 python3.11 python3; do
        if command -v "$py" >/dev/null && "$py" -c 'import sys, venv; assert sys.version_info[:2] == (3, 11)' 2>/dev/null; then
            echo "$py"; return
        fi
    done
    echo "course.sh: Python 3.11 with venv is needed (apt-get install python3.11-venv)" >&2; exit 1
}

setup_venv() {  # $1: pip extras, e.g. "" or "[test]"
    if [ ! -x "$VENV/bin/python" ]; then
        echo "== creating $VENV"
        "$(python_for_venv)" -m venv "$VENV"
    fi
    echo "== installing the course library and its pinned dependencies"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".$1" 2>&1 \
        | grep -v "is neither a file nor a directory" || true
    "$VENV/bin/python" -c 'import torch, nbgrader, tinygpt_course; assert torch.__version__.startswith("2.13.0"), torch.__version__'
    # JupyterLab's news pop-up would cover the lesson: switch it off for this environment
    local settings="$VENV/share/jupyter/lab/settings"
    mkdir -p "$settings"
    echo '{"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false}}' \
        > "$settings/overrides.json"
}

setup_system() {  # what the browser and hub tests need from outside PyPI (run as root, e.g. in CI)
    local missing=()
    [ -x /usr/bin/chromium ] || missing+=(chromium)
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

case "${1:-lab}" in
    setup)
        setup_venv "${2:+[$2]}" ;;
    lab)
        setup_venv ""
        export PATH="$VENV/bin:$PATH"
        shift || true
        extra=(); [ "$(id -u)" = 0 ] && extra+=(--allow-root)
        exec jupyter lab "${extra[@]}" --ServerApp.root_dir="$ROOT" \
            --LabApp.default_url=/lab/tree/release/multihead/multihead.ipynb "$@" ;;
    test)
        setup_system
        setup_venv "[test]"
        export PATH="$VENV/bin:$PATH"
        shift || true
        exec python -m pytest "$@" ;;
    *)
        sed -n '2,6p' "$0"; exit 2 ;;
esac
