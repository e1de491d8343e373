#!/usr/bin/env bash
# The install users do, tested: build the sdist and, from it, the wheel; install the wheel with
# pipx (its own fresh virtual environment, as the editors' READMEs say); then, from a folder
# outside the checkout, run
# what a user runs: --version, doctor, `dg-lsp complete` on a Python and a JavaScript file, and
# one editor session over LSP (scripts/lsp_session.py) against the installed console script.
#
#   scripts/check_install.sh [PYTHON]   (PYTHON has `build` and `pipx`; default: python3)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${1:-python3}
work=$(mktemp -d)
# The resident engine the session starts lives (and is stopped) in this run's own folder.
export XDG_RUNTIME_DIR="$work/runtime"
mkdir -m 700 "$XDG_RUNTIME_DIR"
stop_engine() {
  "$venv/bin/python" -c 'from engine.serve.socket.client import EngineClient, EngineUnavailable
from engine.serve.socket.endpoint import runtime_dir, Endpoint
for sock in runtime_dir().glob("*.sock"):
    try: EngineClient(Endpoint(sock)).shutdown()
    except EngineUnavailable: pass' 2>/dev/null || true
  rm -rf "$work"
}
trap stop_engine EXIT
export PIPX_HOME="$work/pipx" PIPX_BIN_DIR="$work/bin" PIPX_MAN_DIR="$work/man"
venv="$PIPX_HOME/venvs/dg-lsp"

echo "== build: sdist, then the wheel from the sdist"
"$python" -m build --outdir "$work/dist" "$repo" > "$work/build.log" 2>&1 \
  || { tail -30 "$work/build.log"; exit 1; }
ls -l "$work/dist"
wheel=$(ls "$work"/dist/*.whl)
sdist=$(ls "$work"/dist/*.tar.gz)
"$python" -m zipfile -l "$wheel" > "$work/wheel.txt"
tar -tzf "$sdist" > "$work/sdist.txt"
# Each data file's place in the wheel, then in the sdist (the queries sit at the repository's
# top, grammars/, and install as dg_lsp/grammars/: setup.py maps them).
for pair in dg_lsp/grammars/python/context.scm:grammars/python/context.scm \
            dg_lsp/grammars/go/actions.scm:grammars/go/actions.scm \
            dg_lsp/examples/fib.py:dg_lsp/examples/fib.py \
            dg_lsp/document/gate_calibrator.json:dg_lsp/document/gate_calibrator.json \
            engine/bundled/default/config.json:engine/bundled/default/config.json; do
  in_wheel=${pair%%:*} in_sdist=${pair#*:}
  grep -q "^$in_wheel " "$work/wheel.txt" || { echo "the wheel lacks $in_wheel"; exit 1; }
  grep -q "/$in_sdist$" "$work/sdist.txt" || { echo "the sdist lacks $in_sdist"; exit 1; }
done

echo "== pipx install the wheel"
"$python" -m pipx install "$wheel" 2>&1 | grep -v "^WARNING: Location" || true
test -x "$work/bin/dg-lsp" -a -x "$work/bin/dg-engine" || { echo "pipx installed no dg-lsp"; exit 1; }

echo "== run it from outside the checkout"
mkdir "$work/project" && cd "$work/project"
cp "$repo/dg_lsp/examples/fib.py" "$repo/dg_lsp/examples/fib.js" .
bin="$work/bin"
"$bin/dg-lsp" --version
"$bin/dg-lsp" doctor
# --min-confidence 0 as in the README: at its default the confidence gate hides this suggestion.
echo "-- dg-lsp complete fib.py:8:11"; "$bin/dg-lsp" complete fib.py:8:11 --min-confidence 0
echo "-- dg-lsp complete fib.js:7:9";  "$bin/dg-lsp" complete fib.js:7:9
echo "-- one LSP session"
"$venv/bin/python" "$repo/scripts/lsp_session.py" "$bin/dg-lsp"
echo "install check passed"
