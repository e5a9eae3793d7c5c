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
# System packages, installed quietly when missing and we can (root with apt-get); never fatal:
# bubblewrap is the sandbox for model-written code (metagen.sandbox; without it the sandbox
# preflight refuses and its tests skip), chromium the headless browser the report's tests drive
# through Playwright (never `playwright install`; without it those tests skip). Both skips name
# the install command.
apt_install() {  # COMMAND PACKAGE
    if ! command -v "$1" >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 \
            && [ "$(id -u)" = 0 ]; then
        { apt-get install -y -qq "$2" \
            || { apt-get update -qq && apt-get install -y -qq "$2"; }; } >/dev/null 2>&1 \
            || echo "setup: could not install $2 (apt-get install -y $2)" >&2
    fi
}
apt_install bwrap bubblewrap
apt_install chromium chromium
stamp=.venv/.metagen-installed
if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ]; then
    exit 0
fi
if ! "$VPY" -c "import torch" 2>/dev/null; then
    "$VPY" -m pip install -q "torch==2.13.0" || "$VPY" -m pip install -q "torch>=2.4"
fi
"$VPY" -m pip install -q -e ".[dev]"
touch "$stamp"
