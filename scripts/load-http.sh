#!/usr/bin/env bash
# Load test of the HTTP front: N principals, each with its own sandboxed fs-server, calling in
# parallel through the Python SDK's HTTP client, beside the same calls over stdio (through
# palisade and direct). Reports latency, errors and memory per principal; asserts nothing.
# Usage: scripts/load-http.sh [PRINCIPALS (default 20)] [CALLS each (default 200)]
set -euo pipefail
cd "$(dirname "$0")/.."
deps=${PALISADE_TEST_DEPS:-$PWD/target/test-deps}
[ -x "$deps/venv/bin/python" ] || scripts/install-test-deps.sh
cargo build --release --quiet
PYTHONPATH=scripts "$deps/venv/bin/python" scripts/load_http.py "$PWD/target/release/palisade" \
  "${1:-20}" "${2:-200}"
