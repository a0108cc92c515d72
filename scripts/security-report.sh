#!/bin/sh
# Regenerates the attack tables in docs/security.md from the attack suites (the hostile
# MCP server and the hostile agent behind `palisade serve`, the hostile program under
# `palisade run`). Every suite
# asserts zero escapes and a full control; the tables are written only from what they saw.
set -eu
cd "$(dirname "$0")/.."
export PALISADE_TEST_DEPS="${PALISADE_TEST_DEPS:-$PWD/target/test-deps}"
PALISADE_UPDATE_DOCS=1 cargo test --test attacks every_attack -- --nocapture
PALISADE_UPDATE_DOCS=1 cargo test --test attacks every_agent_attack -- --nocapture
PALISADE_UPDATE_DOCS=1 cargo test --test sandbox every_attack_fails_in_the_sandbox
echo "docs/security.md updated"
