#!/usr/bin/env bash
# kustomize_render.sh OVERLAY_DIR: `kubectl kustomize` renders the overlay into a non-empty set of
# manifests with the expected kinds. Exit 77 (ctest SKIP_RETURN_CODE) when kubectl is missing.
set -euo pipefail
overlay="$1"
if ! command -v kubectl >/dev/null 2>&1; then
  echo "SKIP: kubectl not found on PATH; cannot render ${overlay}"
  exit 77
fi
out="$(kubectl kustomize "${overlay}")"
status=0
for kind in ConfigMap Service Deployment StatefulSet PodDisruptionBudget ServiceMonitor NetworkPolicy; do
  if ! grep -q "^kind: ${kind}\$" <<<"${out}"; then
    echo "FAIL: ${overlay} renders no ${kind}"
    status=1
  fi
done
if ! grep -q "clusterIP: None" <<<"${out}"; then
  echo "FAIL: ${overlay}: the replica Service is not headless (clusterIP: None)"
  status=1
fi
echo "${overlay}: $(grep -c '^kind:' <<<"${out}") objects rendered"
exit "${status}"
