#!/usr/bin/env python3
"""Every kvcascade_* metric used by the Grafana dashboard and the Prometheus config is declared in
metrics/metrics.cc (histogram series suffixes _bucket/_sum/_count stripped); the dashboard and the
sample file_sd targets parse as JSON, and the dashboard uses the ${DS_PROMETHEUS} datasource.

usage: check_metric_names.py REPO_ROOT"""
import json
import os
import re
import sys

NAME = re.compile(r"\bkvcascade_[a-zA-Z0-9_]*[a-zA-Z0-9]")


def used_names(text, declared):
    """Metric names in text; a histogram's series suffix is stripped unless the name with it is
    itself declared (kvcascade_decode_batch_sibling_count is a histogram, not a _count series)."""
    names = set()
    for n in NAME.findall(text):
        if n not in declared:
            for suffix in ("_bucket", "_sum", "_count"):
                if n.endswith(suffix):
                    n = n[: -len(suffix)]
                    break
        names.add(n)
    return names


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    failures = []
    with open(os.path.join(root, "metrics/metrics.cc")) as f:
        declared = set(re.findall(r'\.Name\("(kvcascade_[a-zA-Z0-9_]+)"\)', f.read()))
    if not declared:
        print("FAIL: no .Name(\"kvcascade_...\") declarations found in metrics/metrics.cc")
        return 1

    dash_path = os.path.join(root, "deploy/grafana/kvcascade.json")
    with open(dash_path) as f:
        dash_text = f.read()
    try:
        dash = json.loads(dash_text)
    except ValueError as e:
        print("FAIL: %s does not parse: %s" % (dash_path, e))
        return 1
    exprs = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                exprs.append(node["expr"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(dash)
    if not exprs:
        failures.append("the dashboard has no PromQL expressions")
    if "${DS_PROMETHEUS}" not in dash_text:
        failures.append("the dashboard does not use the ${DS_PROMETHEUS} datasource variable")
    names = {"deploy/grafana/kvcascade.json": used_names(dash_text, declared)}

    prom_path = os.path.join(root, "deploy/prometheus/prometheus.yml")
    with open(prom_path) as f:
        names["deploy/prometheus/prometheus.yml"] = used_names(f.read(), declared)
    targets_path = os.path.join(root, "deploy/prometheus/targets.json")
    try:
        with open(targets_path) as f:
            groups = json.load(f)
        if not isinstance(groups, list) or not all("targets" in g for g in groups):
            failures.append("%s: not a file_sd list of {targets, labels}" % targets_path)
    except ValueError as e:
        failures.append("%s does not parse: %s" % (targets_path, e))

    for where, used in sorted(names.items()):
        unknown = sorted(used - declared)
        if unknown:
            failures.append("%s uses undeclared metrics: %s" % (where, ", ".join(unknown)))
        print("%s: %d metric names, all %s" % (where, len(used), "declared" if not unknown else "NOT declared"))
    unused = sorted(declared - names["deploy/grafana/kvcascade.json"])
    if unused:
        print("note: declared but not on the dashboard: %s" % ", ".join(unused))
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("ok: %d expressions, %d declared metrics" % (len(exprs), len(declared)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
