#!/usr/bin/env bash
# Installs, when missing, everything the tests and benchmarks run against: bubblewrap, socat,
# ripgrep (apt, as root), the real MCP servers from npm and PyPI pinned in tests/deps/, under
# target/test-deps/. Idempotent: a second run with unchanged pins does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
deps="$root/target/test-deps"
mkdir -p "$deps"

log() { printf '\n== %s\n' "$*" >&2; }

# --- system packages: bubblewrap (the sandbox), socat (network bridge), ripgrep (srt needs it)
missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v socat >/dev/null || missing+=(socat)
command -v rg >/dev/null || missing+=(ripgrep)
command -v git >/dev/null || missing+=(git)
command -v curl >/dev/null || missing+=(curl)  # the egress tests' HTTP client
command -v strace >/dev/null || missing+=(strace)  # palisade run --trace-denials
command -v python3 >/dev/null || missing+=(python3 python3-venv)
command -v node >/dev/null || missing+=(nodejs npm)
if ((${#missing[@]})); then
  if [ "$(id -u)" = 0 ]; then
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "missing: ${missing[*]}; install them (apt-get install ${missing[*]}) or run as root" >&2
    exit 1
  fi
fi

# --- real MCP servers from npm, pinned by tests/deps/package-lock.json
if ! cmp -s tests/deps/package-lock.json "$deps/package-lock.json" || [ ! -d "$deps/node_modules" ]; then
  log "installing npm test dependencies"
  cp tests/deps/package.json tests/deps/package-lock.json "$deps/"
  (cd "$deps" && npm ci --no-audit --no-fund --loglevel=error)
fi

# --- the Python MCP SDK (a real client) and servers from PyPI, pinned in requirements.txt
venv="$deps/venv"
if ! cmp -s tests/deps/requirements.txt "$venv/requirements.txt"; then
  log "installing Python test dependencies"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r tests/deps/requirements.txt
  cp tests/deps/requirements.txt "$venv/requirements.txt"
fi

# mcp-server-fetch extracts pages with readabilipy, whose Readability.js helper runs
# `npm install` in its own package directory on first use. Inside the sandbox that directory
# is read-only and the registry is not an allowed domain, so the first fetch would fail with
# a refused connection; install it here, as a user would once when installing the server.
# readabilipy ships only a package.json with open ranges: pin it with our lock file
# (tests/deps/readabilipy/), falling back to a plain install if a newer readabilipy changed
# its dependencies.
readability=$("$venv/bin/python" -c 'import os, readabilipy; print(os.path.join(os.path.dirname(readabilipy.__file__), "javascript"))')
if [ -f "$readability/package.json" ] && [ ! -d "$readability/node_modules" ]; then
  log "installing readabilipy's JavaScript helper (mcp-server-fetch)"
  cp tests/deps/readabilipy/package-lock.json "$readability/"
  (cd "$readability" && { npm ci --no-audit --no-fund --loglevel=error ||
    npm install --no-audit --no-fund --loglevel=error; })
fi

# --- cargo-fuzz (scripts/fuzz.sh), pinned, built from crates.io into target/test-deps
cargo_fuzz_version=0.13.2
if ! "$deps/cargo-bin/bin/cargo-fuzz" --version 2>/dev/null | grep -q " $cargo_fuzz_version\$"; then
  log "installing cargo-fuzz $cargo_fuzz_version"
  cargo install cargo-fuzz --version "$cargo_fuzz_version" --locked --root "$deps/cargo-bin" --quiet
fi
