#!/usr/bin/env bash
# Builds helm (helm.sh/helm/v4) from the Go module proxy into a per-machine cache keyed by its version, as
# deploy/local/build.sh does for the control plane. Idempotent: with a finished build it only prints the
# path of the helm binary.
#
# Usage: deploy/helm/build.sh          build if needed, print the helm binary's path
# Env:   MPIJOB_HELM_CACHE  cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/mpijob-operator/helm)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
. "$HERE/versions.env"

CACHE_ROOT=${MPIJOB_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mpijob-operator/helm}
BIN_DIR=$CACHE_ROOT/$HELM_VERSION/bin
STAMP=$BIN_DIR/.build-complete

if [ -f "$STAMP" ]; then
  echo "$BIN_DIR/helm"
  exit 0
fi
command -v go >/dev/null || { echo "helm build: error: go not found (Go >= 1.25 is needed)" >&2; exit 1; }
mkdir -p "$BIN_DIR"
exec 9>>"$BIN_DIR.lock"
flock 9  # one build at a time; a second caller waits, then finds the stamp
if [ ! -f "$STAMP" ]; then
  echo "helm build: building helm $HELM_VERSION from the Go module proxy (once per machine)" >&2
  start=$(date +%s)
  CGO_ENABLED=0 GOTOOLCHAIN=${GOTOOLCHAIN:-local} GOFLAGS="${GOFLAGS:-} -buildvcs=false" GOBIN="$BIN_DIR" \
    go install "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
  touch "$STAMP"
  echo "helm build: built in $(( $(date +%s) - start ))s" >&2
fi
echo "$BIN_DIR/helm"
