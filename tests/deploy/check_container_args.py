#!/usr/bin/env python3
"""Renders a kustomize overlay and runs every container's command line through the kvcascade
binary's own flag parser: `kvcascade <args> --check-config` must exit 0.

Kubernetes expands $(VAR) in args from the container's environment; this does the same with
env values, ConfigMap keys (env valueFrom.configMapKeyRef and envFrom.configMapRef, read from the
rendered ConfigMaps) and downward-API fields (metadata.name -> r0, metadata.namespace -> default).
A reference that Kubernetes could not resolve fails the test (it would reach the binary literally).

usage: check_container_args.py KVCASCADE_BINARY OVERLAY_DIR [--expect-gpu]
exit: 0 ok, 1 failure, 77 skipped (kubectl missing)."""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import yaml_subset  # noqa: E402

FIELDS = {"metadata.name": "r0", "metadata.namespace": "default", "spec.nodeName": "node0",
          "status.podIP": "10.0.0.1", "spec.serviceAccountName": "default"}


def pod_spec(doc):
    kind = doc.get("kind")
    spec = doc.get("spec") or {}
    if kind == "Pod":
        return spec
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        return (spec.get("template") or {}).get("spec")
    if kind == "CronJob":
        return (((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}).get("spec")
    return None


def container_env(c, configmaps):
    env = {}
    for src in c.get("envFrom") or []:
        ref = src.get("configMapRef")
        if ref is None:
            continue
        data = configmaps.get(ref.get("name"))
        if data is None:
            raise RuntimeError("envFrom names a ConfigMap that is not rendered: %s" % ref.get("name"))
        prefix = src.get("prefix") or ""
        for k, v in data.items():
            env[prefix + k] = "" if v is None else str(v)
    for e in c.get("env") or []:
        name = e["name"]
        if "value" in e:
            env[name] = "" if e["value"] is None else str(e["value"])
            continue
        vf = e.get("valueFrom") or {}
        if "fieldRef" in vf:
            path = vf["fieldRef"]["fieldPath"]
            env[name] = FIELDS.get(path, "x")
        elif "configMapKeyRef" in vf:
            ref = vf["configMapKeyRef"]
            data = configmaps.get(ref["name"])
            if data is None or ref["key"] not in data:
                raise RuntimeError("%s: no ConfigMap key %s/%s" % (name, ref["name"], ref["key"]))
            env[name] = str(data[ref["key"]])
        else:
            env[name] = "x"  # secrets, resource fields: any value parses as a string
    return env


def expand(arg, env, unresolved):
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        if name in env:
            return env[name]
        unresolved.append(name)
        return m.group(0)
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", sub, arg)


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    binary, overlay = sys.argv[1], sys.argv[2]
    expect_gpu = "--expect-gpu" in sys.argv[3:]
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("SKIP: kubectl not found on PATH; cannot render %s" % overlay)
        return 77
    rendered = subprocess.run([kubectl, "kustomize", overlay], capture_output=True, text=True)
    if rendered.returncode != 0:
        print("FAIL: kubectl kustomize %s:\n%s" % (overlay, rendered.stderr))
        return 1
    docs = [d for d in yaml_subset.load_all(rendered.stdout) if d]
    configmaps = {d["metadata"]["name"]: (d.get("data") or {})
                  for d in docs if d.get("kind") == "ConfigMap"}
    failures, checked = [], []
    for doc in docs:
        spec = pod_spec(doc)
        if not spec:
            continue
        for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            where = "%s/%s container %s" % (doc["kind"], doc["metadata"]["name"], c.get("name"))
            image = str(c.get("image") or "")
            if "kvcascade" not in image:
                print("note: %s runs image %r, not kvcascade; not checked" % (where, image))
                continue
            command, args = c.get("command") or [], c.get("args") or []
            if command:
                if os.path.basename(str(command[0])) != "kvcascade":
                    failures.append("%s: command %r is not kvcascade" % (where, command))
                    continue
                argv = list(command[1:]) + list(args)
            else:
                argv = list(args)  # the image's ENTRYPOINT is kvcascade
            if not argv:
                failures.append("%s: no subcommand in args" % where)
                continue
            env = container_env(c, configmaps)
            unresolved = []
            argv = [expand(str(a), env, unresolved) for a in argv]
            if unresolved:
                failures.append("%s: args reference undefined variables %s" % (where, unresolved))
                continue
            cmd = [binary] + argv + ["--check-config"]
            run = subprocess.run(cmd, capture_output=True, text=True)
            shown = " ".join(cmd)
            print("%s\n  $ %s\n  -> exit %d: %s" % (where, shown, run.returncode,
                                                   (run.stdout + run.stderr).strip()))
            if run.returncode != 0:
                failures.append("%s: `%s` exited %d" % (where, shown, run.returncode))
            checked.append((doc, c, argv))
            if expect_gpu and argv[0] == "replica":
                # One GPU per rank of the replica's split (--tensor-parallel-size, else 1).
                ranks = "1"
                if "--tensor-parallel-size" in argv[:-1]:
                    ranks = argv[argv.index("--tensor-parallel-size") + 1]
                limits = ((c.get("resources") or {}).get("limits") or {})
                if str(limits.get("nvidia.com/gpu")) != ranks:
                    failures.append("%s: expected resources.limits nvidia.com/gpu: %s (the "
                                    "replica's ranks)" % (where, ranks))
    commands = {argv[0] for _, _, argv in checked}
    for needed in ("router", "replica"):
        if needed not in commands:
            failures.append("no container runs `kvcascade %s` in %s" % (needed, overlay))
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("ok: %d containers in %s accept their args" % (len(checked), overlay))
    return 0


if __name__ == "__main__":
    sys.exit(main())
