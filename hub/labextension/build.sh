#!/usr/bin/env bash
# Rebuild tinygpt-feedback/ (the JupyterLab extension, as JupyterLab loads it) from index.js.
# Needs npm (the registry) and the course venv's JupyterLab: bash hub/labextension/build.sh
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-../../.venv/bin/python}
npm install --no-audit --no-fund --silent
rm -rf build tinygpt-feedback
node node_modules/@jupyterlab/builder/lib/build-labextension.js \
    --core-path "$("$PY" -c 'import jupyterlab, os; print(os.path.join(os.path.dirname(jupyterlab.__file__), "staging"))')" .
mv build tinygpt-feedback
rm -rf node_modules package-lock.json
