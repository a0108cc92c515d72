#!/usr/bin/env bash
# Makes podman runnable on a host with the hybrid cgroup layout: crun refuses it while the
# hugetlb controller sits on the v2 hierarchy (/sys/fs/cgroup/unified), so mount hugetlb as v1
# once. Idempotent; does nothing on a pure v2 or pure v1 host.
set -euo pipefail
u=/sys/fs/cgroup/unified/cgroup.controllers
if [ -r "$u" ] && grep -qw hugetlb "$u"; then
  [ "$(id -u)" -eq 0 ] || { echo "podman-prep: hugetlb is on cgroup v2 in a hybrid layout; run as root to move it" >&2; exit 1; }
  mkdir -p /tmp/cg-hugetlb
  mountpoint -q /tmp/cg-hugetlb || mount -t cgroup -o hugetlb none /tmp/cg-hugetlb
  echo "podman-prep: moved the hugetlb controller to cgroup v1 (/tmp/cg-hugetlb)" >&2
fi
