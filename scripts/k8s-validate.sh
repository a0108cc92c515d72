#!/usr/bin/env bash
# Validates deploy/kubernetes/: every manifest against the Kubernetes JSON schemas that the PyPI
# package kubernetes-validate ships (strict: unknown fields refused), for the oldest and newest
# versions named below; then the pod template against the "restricted" Pod Security Standard's
# rules (checked here by scripts/pss_restricted.py, not by a real admission controller).
# Not checked: admission itself, the kustomization (no schema), the ingress annotations (the
# controller reads them), and that the image runs under a real kubelet.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${K8S_VALIDATE_VENV:-$PWD/target/k8s-validate-venv}
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q kubernetes-validate
fi
files=$(ls deploy/kubernetes/*.yaml | grep -v kustomization.yaml)
for v in 1.30.0 1.37.0; do
  # shellcheck disable=SC2086
  "$venv/bin/kubernetes-validate" --strict --quiet -k "$v" $files
  echo "schemas ($v, strict): $(echo $files | wc -w) manifests pass"
done
"$venv/bin/python" scripts/pss_restricted.py deploy/kubernetes/deployment.yaml
