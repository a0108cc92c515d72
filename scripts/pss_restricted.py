"""Checks a Deployment's pod template against the rules of the "restricted" Pod Security
Standard (baseline + restricted controls, as the Kubernetes docs list them). A stand-in for
admission where no cluster runs; prints one line per control, exits 1 on any violation."""

import sys

import yaml

ALLOWED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                   "persistentVolumeClaim", "projected", "secret"}


def check(pod: dict) -> list:
    bad = []
    psc = pod.get("securityContext", {})
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            bad.append(f"{key} is set")
    for v in pod.get("volumes", []):
        kinds = set(v) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            bad.append(f"volume {v['name']} uses {kinds - ALLOWED_VOLUMES}")
    containers = pod.get("containers", []) + pod.get("initContainers", [])
    for c in containers:
        sc = c.get("securityContext", {})
        n = c["name"]
        if sc.get("privileged"):
            bad.append(f"{n}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            bad.append(f"{n}: allowPrivilegeEscalation is not false")
        if "ALL" not in sc.get("capabilities", {}).get("drop", []):
            bad.append(f"{n}: capabilities do not drop ALL")
        if set(sc.get("capabilities", {}).get("add", [])) - {"NET_BIND_SERVICE"}:
            bad.append(f"{n}: adds capabilities")
        if not sc.get("runAsNonRoot", psc.get("runAsNonRoot")):
            bad.append(f"{n}: runAsNonRoot not true")
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            bad.append(f"{n}: runAsUser 0")
        prof = sc.get("seccompProfile", psc.get("seccompProfile", {})).get("type")
        if prof not in ("RuntimeDefault", "Localhost"):
            bad.append(f"{n}: seccompProfile {prof}")
        for p in c.get("ports", []):
            if p.get("hostPort"):
                bad.append(f"{n}: hostPort")
    return bad


def main(path: str) -> int:
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    rc = 0
    for d in docs:
        if d.get("kind") not in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            continue
        bad = check(d["spec"]["template"]["spec"])
        name = f"{d['kind']}/{d['metadata']['name']}"
        if bad:
            rc = 1
            for b in bad:
                print(f"restricted PSS: {name}: VIOLATION {b}")
        else:
            print(f"restricted PSS (local rules, not admission): {name} passes")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
