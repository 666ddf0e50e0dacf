#!/usr/bin/env python3
"""Renders a kustomize overlay and checks its security wiring:

- router probes: liveness on /livez (the process serves), readiness on /readyz (a replica is
  healthy); /health as liveness restarted every router during a replica outage;
- replica: liveness on /livez, readiness on /readyz (a failed update's 503 must not restart it);
  --api-key-file from a mounted Secret, probes on /livez, /readyz or /health (the
  paths open without a key);
- router: --replica-api-key-file from the same Secret, and --admin-api-key-file (its admin
  endpoints: fleet weight updates) from a Secret of its own, not the replicas' (Prometheus holds
  that one);
- a NetworkPolicy selecting the replica pods admits only the router pods and Prometheus pods, on
  the replica's port, and nothing else (no rule with an empty `from`);
- the replica ServiceMonitor scrapes /metrics with the Secret as a Bearer credential.

usage: check_security.py OVERLAY_DIR
exit: 0 ok, 1 failure, 77 skipped (kubectl missing)."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import yaml_subset  # noqa: E402

ROUTER = {"app.kubernetes.io/name": "kvcascade", "app.kubernetes.io/component": "router"}
REPLICA = {"app.kubernetes.io/name": "kvcascade", "app.kubernetes.io/component": "replica"}


def find(docs, kind, component):
    for d in docs:
        labels = (d.get("metadata") or {}).get("labels") or {}
        if d.get("kind") == kind and labels.get("app.kubernetes.io/component") == component:
            return d
    return None


def container(doc):
    return ((doc["spec"]["template"]["spec"].get("containers")) or [{}])[0]


def probe_path(c, probe):
    return (((c.get(probe) or {}).get("httpGet")) or {}).get("path")


def flag_value(args, flag):
    args = [str(a) for a in args]
    return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else None


def secret_file_ok(doc, path, failures, where):
    """The file at `path` comes from a volume backed by a Secret."""
    if path is None:
        failures.append("%s: no key file flag" % where)
        return None
    spec = doc["spec"]["template"]["spec"]
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    for m in container(doc).get("volumeMounts") or []:
        mount = str(m.get("mountPath", "")).rstrip("/") + "/"
        if path.startswith(mount):
            secret = (volumes.get(m.get("name")) or {}).get("secret") or {}
            if secret.get("secretName"):
                return secret["secretName"]
            failures.append("%s: %s is mounted from a volume that is not a Secret" % (where, path))
            return None
    failures.append("%s: %s is on no mounted volume" % (where, path))
    return None


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    overlay = sys.argv[1]
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("SKIP: kubectl not found on PATH; cannot render %s" % overlay)
        return 77
    rendered = subprocess.run([kubectl, "kustomize", overlay], capture_output=True, text=True)
    if rendered.returncode != 0:
        print("FAIL: kubectl kustomize %s:\n%s" % (overlay, rendered.stderr))
        return 1
    docs = [d for d in yaml_subset.load_all(rendered.stdout) if d]
    failures = []

    router = find(docs, "Deployment", "router")
    replica = find(docs, "StatefulSet", "replica")
    if router is None or replica is None:
        print("FAIL: %s renders no router Deployment or replica StatefulSet" % overlay)
        return 1
    rc, pc = container(router), container(replica)
    if probe_path(rc, "livenessProbe") != "/livez":
        failures.append("router livenessProbe is %r, want /livez" % probe_path(rc, "livenessProbe"))
    if probe_path(rc, "readinessProbe") != "/readyz":
        failures.append("router readinessProbe is %r, want /readyz" % probe_path(rc, "readinessProbe"))
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        if probe in pc and probe_path(pc, probe) not in ("/livez", "/readyz", "/health"):
            failures.append("replica %s is %r: only /livez, /readyz and /health are open "
                            "without a key" % (probe, probe_path(pc, probe)))
    # A replica whose weights a failed update left incomplete answers 503 on /readyz and /health
    # until the next update mends them: liveness on those would restart it instead.
    if probe_path(pc, "livenessProbe") != "/livez":
        failures.append("replica livenessProbe is %r, want /livez" % probe_path(pc, "livenessProbe"))
    if probe_path(pc, "readinessProbe") != "/readyz":
        failures.append("replica readinessProbe is %r, want /readyz" % probe_path(pc, "readinessProbe"))
    replica_secret = secret_file_ok(replica, flag_value(pc.get("args") or [], "--api-key-file"),
                                    failures, "replica --api-key-file")
    router_secret = secret_file_ok(router, flag_value(rc.get("args") or [], "--replica-api-key-file"),
                                   failures, "router --replica-api-key-file")
    if replica_secret and router_secret and replica_secret != router_secret:
        failures.append("the router reads Secret %s, the replicas %s" % (router_secret, replica_secret))
    admin_secret = secret_file_ok(router, flag_value(rc.get("args") or [], "--admin-api-key-file"),
                                  failures, "router --admin-api-key-file")
    if admin_secret and admin_secret in (replica_secret, router_secret):
        failures.append("the router's admin key comes from Secret %s, which holds the replicas' "
                        "key: give it a Secret of its own" % admin_secret)

    policies = [d for d in docs if d.get("kind") == "NetworkPolicy"
                and ((d.get("spec") or {}).get("podSelector") or {}).get("matchLabels") == REPLICA]
    if not policies:
        failures.append("no NetworkPolicy selects the replica pods")
    for p in policies:
        spec = p["spec"]
        name = p["metadata"]["name"]
        if "Ingress" not in (spec.get("policyTypes") or []):
            failures.append("NetworkPolicy %s does not restrict Ingress" % name)
        rules = spec.get("ingress") or []
        sources = []
        for rule in rules:
            peers = rule.get("from") or []
            if not peers:
                failures.append("NetworkPolicy %s has a rule admitting every source" % name)
            ports = [str(x.get("port")) for x in rule.get("ports") or []]
            if not ports or any(x not in ("http", "8000") for x in ports):
                failures.append("NetworkPolicy %s: rule ports %r, want the replica port" % (name, ports))
            for peer in peers:
                if "ipBlock" in peer:
                    failures.append("NetworkPolicy %s admits an ipBlock" % name)
                labels = (peer.get("podSelector") or {}).get("matchLabels")
                if labels == ROUTER:
                    sources.append("router")
                elif labels and labels.get("app.kubernetes.io/name") == "prometheus":
                    sources.append("prometheus")
                else:
                    failures.append("NetworkPolicy %s admits unexpected peer %r" % (name, peer))
        if sorted(set(sources)) != ["prometheus", "router"]:
            failures.append("NetworkPolicy %s admits %r, want the router and Prometheus" % (name, sources))

    monitor = find(docs, "ServiceMonitor", "replica")
    if monitor is not None:
        for ep in monitor["spec"].get("endpoints") or []:
            auth = ep.get("authorization") or {}
            creds = auth.get("credentials") or {}
            if auth.get("type") != "Bearer" or creds.get("name") != replica_secret:
                failures.append("replica ServiceMonitor endpoint %s has no Bearer credential from "
                                "Secret %s" % (ep.get("path"), replica_secret))

    if failures:
        print("FAIL: %s\n  " % overlay + "\n  ".join(failures))
        return 1
    print("ok: %s: probes, API keys, NetworkPolicy and scrape credentials are wired" % overlay)
    return 0


if __name__ == "__main__":
    sys.exit(main())
