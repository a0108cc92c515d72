#!/usr/bin/env bash
# Load test of the HTTP front with palisade's own native clients: one principal's calls over
# HTTP beside the same calls over stdio through palisade and direct, then N principals at
# once, each with its own sandboxed fs-server; reports latency, errors and memory per idle
# principal; asserts nothing.
# Usage: scripts/load-http.sh [PRINCIPALS (default 200)] [CALLS each (default 200)] [ROUNDS (3)]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
python3 scripts/load_http.py "$PWD/target/release/palisade" "${1:-200}" "${2:-200}" "${3:-3}"
