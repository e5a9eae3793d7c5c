#!/usr/bin/env bash
# Create .venv (if needed) and install metagen with its dev extras.
# torch goes in first: a torch the interpreter can already import is kept (the venv sees system
# site-packages); otherwise torch==2.13.0 (a local CPU build on our machines), else any torch>=2.4.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv --system-site-packages .venv
fi
VPY=.venv/bin/python
# bubblewrap is the sandbox for model-written code (metagen.sandbox). Installed quietly when
# missing and we can (root with apt-get); never fatal: without it the sandbox preflight refuses
# and its tests skip, naming the install command.
if ! command -v bwrap >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 \
        && [ "$(id -u)" = 0 ]; then
    { apt-get install -y -qq bubblewrap \
        || { apt-get update -qq && apt-get install -y -qq bubblewrap; }; } >/dev/null 2>&1 \
        || echo "setup: could not install bubblewrap (apt-get install -y bubblewrap)" >&2
fi
stamp=.venv/.metagen-installed
if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ]; then
    exit 0
fi
if ! "$VPY" -c "import torch" 2>/dev/null; then
    "$VPY" -m pip install -q "torch==2.13.0" || "$VPY" -m pip install -q "torch>=2.4"
fi
"$VPY" -m pip install -q -e ".[dev]"
touch "$stamp"
