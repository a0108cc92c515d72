#!/usr/bin/env bash
# Proves the runtime image in an unprivileged container: podman's default seccomp profile, the
# image's non-root user, --cap-drop=ALL, no-new-privileges, a read-only root (tmpfs for /tmp and
# the state dir). Runs `palisade check` inside, then `palisade serve --http` with a config
# serving `palisade fs-server`, reached from the host through the Python SDK's HTTP client (and
# the same fs-server launched directly in the container as the control), and times container
# start to /readyz. Then the attack suite's serve table (tests/attacks/serve.rs) inside the same kind
# of container, under the tiers `palisade check` finds there, each attack also launched directly
# as its control (scripts/attack-image.sh makes the image it runs in), the network allowlist
# rows included (a server with an allowlist, its Landlock loopback proxy port, an origin on
# the container's loopback). Prints both tables.
# Exit: 0 when every row passed, or when podman cannot run containers on this machine (said so);
# non-zero on a failed row, an attack that gets through, a control that fails where it must
# succeed, or a real image build error.
# Usage: scripts/container-test.sh   (env: IMAGE, PALISADE_BIN as for scripts/image.sh,
#        PALISADE_TEST_DEPS for the Python venv, REBUILD=1 to rebuild the image,
#        ATTACK_HARNESS=path to the built tests/attacks binary (default: cargo builds it),
#        NO_ATTACKS=1 to leave the attack table out)
set -uo pipefail
cd "$(dirname "$0")/.."
image=${IMAGE:-localhost/palisade:latest}
deps=${PALISADE_TEST_DEPS:-$PWD/target/test-deps}
py=$deps/venv/bin/python
log() { echo "== container-test: $*" >&2; }

if ! command -v podman >/dev/null; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman >/dev/null
  fi
fi
command -v podman >/dev/null || { echo "container-test: SKIPPED: podman is not installed and cannot be installed here"; exit 0; }
scripts/podman-prep.sh || { echo "container-test: SKIPPED: cannot prepare cgroups for podman here"; exit 0; }
limits=(--ulimit nofile=1024:1024 --ulimit nproc=4096:4096)
# Can this machine run a container at all? Checked with the image's base if present, else
# with an empty scratch import (no registry is needed for either).
if [ -n "${REBUILD:-}" ] || ! podman image exists "$image"; then
  scripts/image.sh "$image" || { echo "container-test: FAILED: the image did not build" >&2; exit 1; }
fi
if ! probe=$(podman run --rm "${limits[@]}" "$image" --version 2>&1); then
  echo "container-test: SKIPPED: podman cannot run a container on this machine: $probe"
  exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/palisade-ctest.XXXXXX")
name=palisade-ctest-$$
cleanup() { podman rm -f -t 0 "$name" >/dev/null 2>&1; rm -rf "$work"; }
trap cleanup EXIT
[ -n "${KEEP:-}" ] && trap "podman rm -f -t 0 $name >/dev/null 2>&1; echo kept $work" EXIT
token=ctest-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf 'agent %s\n' "$(printf %s "$token" | sha256sum | cut -d' ' -f1)" >"$work/tokens"
# PALISADE_BACKEND (auto|landlock|bwrap): the palisade block's `backend`, for a binary that has it.
# The fs server is given /etc/palisade as a read-only root of its own: launched directly (the
# control) it reads the tokens file, so a refusal behind serve is palisade's doing.
fs_args='["fs-server", "--ro-root", "/etc/palisade"]'
cat >"$work/servers.json" <<JSON
{"mcpServers": {"fs": {"command": "/usr/local/bin/palisade", "args": $fs_args}},
 "palisade": {"sandboxDir": "/var/lib/palisade/sandbox",${PALISADE_BACKEND:+ \"backend\": \"$PALISADE_BACKEND\",}
              "auditLog": "/var/lib/palisade/audit.jsonl", "policy": null}}
JSON
chmod 600 "$work/tokens"; chmod 644 "$work/servers.json"
chown -R 10001:10001 "$work"
run=(podman run "${limits[@]}" --cap-drop=ALL --security-opt no-new-privileges --read-only
  --tmpfs /tmp:rw,nosuid,nodev,size=64m
  --tmpfs /var/lib/palisade:rw,nosuid,nodev,size=64m,mode=1777
  -v "$work:/etc/palisade:ro,Z")

rows=()
row() { rows+=("$(printf '| %-38s | %-6s | %s |' "$1" "$2" "$3")"); }
fail=0

user=$("${run[@]}" --rm --entrypoint /usr/bin/id "$image" -u 2>&1) || user="? ($user)"
[ "$user" = 10001 ] && row "runs as non-root user" PASS "uid $user" || { row "runs as non-root user" FAIL "$user"; fail=1; }
if "${run[@]}" --rm --entrypoint /bin/sh "$image" -c true >/dev/null 2>&1; then
  row "no shell in the image" INFO "/bin/sh present (IMAGE_KEEP_SHELL?)"
else
  row "no shell in the image" PASS "/bin/sh absent"
fi
tools=""
for t in "/usr/bin/bwrap --version" "/usr/bin/socat -V"; do
  set -- $t
  "${run[@]}" --rm --entrypoint "$1" "$image" "$2" >/dev/null 2>&1 && tools+="${1##*/} ok " || tools+="${1##*/} BROKEN "
done
[[ $tools == *BROKEN* ]] && { row "bwrap, socat run (libraries present)" FAIL "$tools"; fail=1; } \
  || row "bwrap, socat run (libraries present)" PASS "$tools"
check=$("${run[@]}" --rm "$image" check --config /etc/palisade/servers.json 2>&1)
verdict=$(printf '%s\n' "$check" | grep -A1 '^A default server' | tail -1 | sed 's/^ *//')
detail=$(printf '%s\n' "$check" | grep -m1 -E 'bubblewrap cannot|landlock|Landlock' | sed 's/^ *//;s/^- //')
row "palisade check (default server)" INFO "${verdict:-?}${detail:+: $detail}"
printf '%s\n' "$check" >"$work/check.txt"

port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
t0=$(date +%s%N)
cid=$("${run[@]}" -d --name "$name" -p "127.0.0.1:$port:8080" "$image" \
  serve --config /etc/palisade/servers.json --http 0.0.0.0:8080 --tokens /etc/palisade/tokens 2>&1) \
  || { row "serve --http starts" FAIL "$cid"; fail=1; }
ready=""
for _ in $(seq 1 1000); do
  if curl -fsS -o /dev/null "http://127.0.0.1:$port/readyz" 2>/dev/null; then ready=$(date +%s%N); break; fi
  sleep 0.01
done
if [ -n "$ready" ]; then
  row "start to /readyz (podman run -d incl.)" PASS "$(( (ready - t0) / 1000000 )) ms"
  code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$port/mcp")
  [ "$code" = 401 ] && row "no token refused" PASS "HTTP $code" || { row "no token refused" FAIL "HTTP $code"; fail=1; }
  out=$(cd tests/clients && "$py" http_client.py "http://127.0.0.1:$port/mcp" "$token" \
    '[{"tool": "fs__write", "args": {"path": "/var/lib/palisade/sandbox/principals/agent/x.txt", "content": "hi"}}, {"tool": "fs__read", "args": {"path": "/etc/palisade/tokens"}}]' 2>/dev/null)
  printf '%s\n' "$out" >"$work/client.json"
  summary=$(printf '%s\n' "$out" | tail -1 | "$py" -c 'import json,sys
try: r=json.loads(sys.stdin.read())
except ValueError: print("ERROR no report"); sys.exit()
if "error" in r: print("ERROR", r["error"][:150]); sys.exit()
c=r["calls"]
# A refusal by the policy is a result with isError, not a protocol error: judge both.
done = lambda x: x.get("ok") and not x.get("is_error")
w="ok" if done(c[0]) else "refused"
rd="read" if done(c[1]) and "DENIED" not in str(c[1].get("text","")) else "refused"
print("SESSION tools=%d write-in-sandbox=%s read-/etc/palisade/tokens=%s" % (len(r["tools"]), w, rd))
print("FIRST", str(c[0].get("text",""))[:110].replace("\n"," "))' 2>&1)
  first=$(printf '%s\n' "$summary" | sed -n 's/^FIRST //p')
  if printf '%s' "$summary" | grep -q '^SESSION'; then
    row "Python SDK session over HTTP (host)" PASS "$(printf '%s\n' "$summary" | sed -n 's/^SESSION //p')"
    if printf '%s' "$summary" | grep -q 'write-in-sandbox=ok'; then
      if printf '%s' "$summary" | grep -q 'tokens=read'; then
        row "fs-server contained" FAIL "read the mounted tokens file"; fail=1
      else
        row "fs-server contained" PASS "served; the tokens file refused: $(printf '%s\n' "$out" | tail -1 | "$py" -c 'import json,sys; print(str(json.loads(sys.stdin.read())["calls"][1].get("text",""))[:70].replace("\n"," "))' 2>/dev/null)"
      fi
    elif [[ $verdict == REFUSED* ]]; then
      row "fs-server contained" PASS "not started, fail closed as check says: ${first:0:60}"
    else
      row "fs-server contained" FAIL "$first"; fail=1
    fi
  else
    row "Python SDK session over HTTP (host)" FAIL "$summary"; fail=1
  fi
else
  row "start to /readyz" FAIL "not ready within 10 s: $(podman logs "$name" 2>&1 | tail -3 | tr '\n' ' ')"; fail=1
fi
# The control for "fs-server contained": the same fs-server command, launched directly in the
# same container (no palisade serve, no sandbox), reads the tokens file.
direct=$(cd tests/clients && CALLS_ERRLOG="$work/direct.log" timeout 120 "$py" calls.py \
  '[{"tool": "read", "args": {"path": "/etc/palisade/tokens"}}]' -- \
  "${run[@]}" -i --rm "$image" $(printf '%s' "$fs_args" | tr -d '[],"') 2>&1 | tail -1)
if printf '%s' "$direct" | "$py" -c 'import json,sys
c=json.loads(sys.stdin.read())["calls"][0]
sys.exit(0 if not c["error"] and "agent " in c["text"] else 1)' 2>/dev/null; then
  row "fs-server direct (control)" PASS "launched directly it reads the tokens file"
else
  row "fs-server direct (control)" FAIL "the control could not read it: ${direct:0:120}"; fail=1
fi
podman logs "$name" >"$work/serve.log" 2>&1 || true
t1=$(date +%s%N)
podman stop -t 10 "$name" >/dev/null 2>&1
st=$(podman inspect --format '{{.State.ExitCode}}' "$name" 2>/dev/null)
row "SIGTERM stop" INFO "exit $st after $(( ($(date +%s%N) - t1) / 1000000 )) ms"
size=$(podman image inspect --format '{{.Size}}' "$image")
row "image size" INFO "$((size / 1000000)) MB ($image)"

# The attack suite's serve table inside the container: the tests/attacks harness (built on the
# host, bind-mounted read-only) runs in scripts/attack-image.sh's image (the runtime image plus
# python3 and a shell) under the same flags as above, and drives the image's own palisade. The
# tiers are those `palisade check` finds in the container. The harness fails on an attack that
# gets through a tier (beyond those documented for Landlock) and on a failed control, except
# where the container itself refuses the attack (its control then fails: listed, not counted).
attacks_rc=0
if [ -z "${NO_ATTACKS:-}" ]; then
  attack_image=${ATTACK_IMAGE:-localhost/palisade-attacks:latest}
  harness=${ATTACK_HARNESS:-}
  if [ -z "$harness" ]; then
    harness=$(cargo test --test attacks --no-run --message-format=json 2>"$work/harness.log" \
      | "$py" -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["name"]=="attacks" and m.get("executable"): print(m["executable"])' | tail -1)
  fi
  tiers=$("${run[@]}" --rm "$image" check --json 2>/dev/null | "$py" -c 'import json,sys
m=json.load(sys.stdin)["machine"]
t=(["bwrap"] if m["userns"]["status"]=="usable" else [])+(["landlock"] if m["landlock"]["status"]=="available" else [])
print(",".join(t))' 2>/dev/null)
  if [ -z "$harness" ] || [ ! -x "$harness" ]; then
    row "attack table in the container" FAIL "no attacks harness: $(tail -3 "$work/harness.log")"; fail=1
  elif [ -z "$tiers" ]; then
    row "attack table in the container" SKIP "palisade check finds no tier there (no bwrap, no Landlock)"
  elif ! scripts/attack-image.sh "$image" "$attack_image"; then
    row "attack table in the container" FAIL "the attack image did not build"; fail=1
  else
    mkdir -p "$work/attacks"; chown 10001:10001 "$work/attacks"
    site=$(echo "$deps"/venv/lib/python3.*/site-packages)
    t0=$(date +%s)
    podman run --rm "${limits[@]}" --cap-drop=ALL --security-opt no-new-privileges --read-only \
      --tmpfs /tmp:rw,nosuid,nodev,size=256m \
      -v "$harness:$harness:ro" -v "$PWD/tests/attacks:$PWD/tests/attacks:ro" \
      -v "$site:/opt/palisade-test/venv/lib/python3.11/site-packages:ro" \
      -v "$work/attacks:/out" \
      -e PALISADE_TEST_DEPS=/opt/palisade-test -e PALISADE_ATTACK_TIERS="$tiers" \
      -e PALISADE_ATTACK_BIN=/usr/local/bin/palisade -e PALISADE_ATTACK_TABLE=/out/table.md \
      --entrypoint "$harness" "$attack_image" \
      --exact serve::every_attack_through_serve_fails_and_succeeds_without_palisade --nocapture \
      >"$work/attacks.log" 2>&1
    attacks_rc=$?
    secs=$(( $(date +%s) - t0 ))
    if [ -f "$work/attacks/table.md" ]; then
      counts=$(awk -F'|' -v tiers="$tiers" 'BEGIN {split(tiers, T, ",")} FNR>2 && /^\|/ {n++; nf=NF; if ($3 ~ /^ *succeeds/) c++; else s++;
          for (i = 4; i < NF; i++) { if ($i ~ /^ *blocked/) b[i]++; if ($i ~ /SUCCEEDS/) x[i]++; if ($i ~ /beyond this tier/) y[i]++ } }
        END {printf "%d attacks, control succeeded %d (container refuses %d itself)", n, c, s;
          for (i = 4; i < nf; i++) printf "; %s: blocked %d, got through %d (beyond the tier by design %d)", T[i-3], b[i], x[i], y[i]}' "$work/attacks/table.md")
    else
      counts="no table written"
    fi
    if [ $attacks_rc -eq 0 ] && [ -f "$work/attacks/table.md" ]; then
      row "attack table in container ($tiers)" PASS "$counts; ${secs} s"
    else
      row "attack table in container ($tiers)" FAIL "harness exit $attacks_rc; $counts"; fail=1
    fi
  fi
fi

echo
echo "| container check                        | result | detail |"
echo "|----------------------------------------|--------|--------|"
printf '%s\n' "${rows[@]}"
echo
echo "palisade check inside the container:"; sed 's/^/    /' "$work/check.txt"
if [ -f "${work}/attacks/table.md" ]; then
  echo
  echo "attack suite inside the container (tests/attacks/serve.rs, serve table; tiers: $tiers; as uid 10001, default seccomp, --cap-drop=ALL, no-new-privileges, read-only root):"
  cat "$work/attacks/table.md"
  echo "rows the container itself refuses (their control fails there):"
  grep '^skipped ' "$work/attacks.log" | sed 's/^/    /'
fi
if [ $fail -ne 0 ]; then
  echo "--- serve log"; tail -20 "$work/serve.log"
  [ -f "$work/attacks.log" ] && { echo "--- attacks harness"; tail -40 "$work/attacks.log"; }
fi
exit $fail
