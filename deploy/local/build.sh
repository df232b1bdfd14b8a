#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
# kwok) and, with --node, the real node's binaries (kubelet, a minimal CoreDNS) from Go modules into a
# per-machine cache keyed by version. Idempotent: with a finished build it only prints the bin dir.
#
# Usage: deploy/local/build.sh                      build the control plane if needed, print its bin dir
#        deploy/local/build.sh --node               build kubelet + CoreDNS if needed, print their bin dir
#        deploy/local/build.sh --print-bin-dir      print the bin dir (no build; exit 1 if not built)
#        deploy/local/build.sh --print-node-bin-dir likewise for the node binaries
#        deploy/local/build.sh --print-k8s-src      print the k8s.io/kubernetes module dir (downloads it if needed)
# Env:   MPIJOB_K8S_CACHE   cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/mpijob-operator/k8s)
#        MPIJOB_K8S_BIN_DIR bin dir override (default <cache root>/<versions>/bin)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
. "$HERE/versions.env"

CACHE_ROOT=${MPIJOB_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mpijob-operator/k8s}
KEY="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}"
BIN_DIR=${MPIJOB_K8S_BIN_DIR:-$CACHE_ROOT/$KEY/bin}
STAMP=.build-complete
BINARIES="etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok"
# The node binaries have their own stamped dir, so adding them left the control plane's key (and cache) alone.
NODE_KEY="node_k8s-${K8S_VERSION}_coredns-${COREDNS_VERSION}"
NODE_BIN_DIR=${MPIJOB_NODE_BIN_DIR:-$CACHE_ROOT/$NODE_KEY/bin}
NODE_BINARIES="kubelet coredns"

export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}

log() { echo "build.sh: $*" >&2; }

k8s_src() {
  go mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'
}

MODE=control-plane
case "${1:-}" in
  --print-k8s-src) k8s_src; exit 0 ;;
  --print-bin-dir) [ -f "$BIN_DIR/$STAMP" ] || { log "not built: $BIN_DIR"; exit 1; }; echo "$BIN_DIR"; exit 0 ;;
  --print-node-bin-dir)
    [ -f "$NODE_BIN_DIR/$STAMP" ] || { log "not built: $NODE_BIN_DIR"; exit 1; }; echo "$NODE_BIN_DIR"; exit 0 ;;
  --node) MODE=node; BIN_DIR=$NODE_BIN_DIR; BINARIES=$NODE_BINARIES ;;
  "") ;;
  *) echo "usage: $0 [--node|--print-bin-dir|--print-node-bin-dir|--print-k8s-src]" >&2; exit 2 ;;
esac

if [ -f "$BIN_DIR/$STAMP" ]; then
  echo "$BIN_DIR"
  exit 0
fi

command -v go >/dev/null || { log "go not found (need Go >= 1.25 and the Go module proxy)"; exit 1; }
mkdir -p "$(dirname "$BIN_DIR")"
# One build at a time per output dir; a second caller waits, then finds the stamp.
exec 9>"$BIN_DIR.lock"
flock 9
if [ -f "$BIN_DIR/$STAMP" ]; then
  echo "$BIN_DIR"
  exit 0
fi
# Everything goes to a temp dir next to BIN_DIR and is renamed in one step at the end, so an interrupted
# build never leaves a directory that looks finished.
STAGE=$(mktemp -d "$(dirname "$BIN_DIR")/.bin.partial.XXXXXX")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/mpijob-k8s-build.XXXXXX")
trap 'rm -rf "$WORK" "$STAGE"' EXIT
START=$(date +%s)

# A scratch module that can build commands of k8s.io/kubernetes at K8S_VERSION (in the current dir).
k8s_module() {
  go mod init local/k8sbins >/dev/null 2>&1
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  # Same language version and GODEBUG defaults as upstream's own go.mod.
  go mod edit -go="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod")"
  for gd in $(sed -n 's/^godebug \(.*=.*\)$/\1/p' "$gomod"); do go mod edit -godebug="$gd"; done
  # k8s.io/kubernetes requires its staging modules at v0.0.0 with replace lines that consumers ignore;
  # pin each to the matching published v0.<minor>.<patch>.
  local staging="v0.${K8S_VERSION#v1.}" m
  for m in $(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => \./staging/.*#\1#p' "$gomod"); do
    go mod edit -replace="$m=$m@$staging"
  done
}

k8s_ldflags() {
  local minor p ldf="-s -w" build_date
  minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldf="$ldf -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ldf="$ldf -X $p.gitTreeState=clean -X $p.buildDate=$build_date"
  done
  echo "$ldf"
}

# First lines via parameter expansion, not `| head -1`: under pipefail, head closing the pipe early
# kills the writer with SIGPIPE (exit 141) and with it a finished build.
first_line() { local out; out=$("$@" 2>&1) || true; printf '%s\n' "${out%%$'\n'*}"; }

finish() {
  local b
  for b in $BINARIES; do [ -x "$STAGE/$b" ] || { log "missing $b"; exit 1; }; done
  date -u +%Y-%m-%dT%H:%M:%SZ >"$STAGE/$STAMP"
  rm -rf "$BIN_DIR"
  mv -T "$STAGE" "$BIN_DIR"
  log "built in $(($(date +%s) - START))s"
  echo "$BIN_DIR"
}

if [ "$MODE" = node ]; then
  log "coredns $COREDNS_VERSION with only the plugins the node needs (Go build; about 6 min)"
  mkdir -p "$WORK/coredns" && cd "$WORK/coredns"
  cp "$HERE/coredns/main.go" .
  go mod init local/coredns >/dev/null 2>&1
  go get "github.com/coredns/coredns@$COREDNS_VERSION"
  go mod tidy >/dev/null
  go build -trimpath -ldflags "-s -w" -o "$STAGE/coredns" .
  log "kubelet $K8S_VERSION (Go build; about 12 min on 2 busy cores, less when the control plane's build cache is warm)"
  mkdir -p "$WORK/k8s" && cd "$WORK/k8s"
  k8s_module
  go get "k8s.io/kubernetes/cmd/kubelet@$K8S_VERSION"
  go build -trimpath -tags=selinux,notest -ldflags "$(k8s_ldflags)" -o "$STAGE/kubelet" k8s.io/kubernetes/cmd/kubelet
  {
    first_line "$STAGE/kubelet" --version
    first_line "$STAGE/coredns" -version
  } >"$STAGE/versions.txt"
  finish
  exit 0
fi

log "control plane: etcd, kwok, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (Go build; 10-30 min cold on 2 cores)"

build_etcd() {
  local ver=$1 mod="$WORK/etcd-$1"
  mkdir -p "$mod" && cd "$mod"
  go mod init local/etcdbin >/dev/null 2>&1
  go get "go.etcd.io/etcd/server/v3@$ver" || return 1
  go build -trimpath -ldflags "-s -w" -o "$STAGE/etcd" go.etcd.io/etcd/server/v3
}

log "etcd $ETCD_VERSION"
if ! build_etcd "$ETCD_VERSION"; then
  log "etcd $ETCD_VERSION failed, trying $ETCD_VERSION_FALLBACK"
  build_etcd "$ETCD_VERSION_FALLBACK"
fi

log "kwok $KWOK_VERSION"
GOBIN="$STAGE" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"

log "kubernetes $K8S_VERSION"
mkdir -p "$WORK/k8s" && cd "$WORK/k8s"
k8s_module
CMDS="kube-apiserver kube-controller-manager kube-scheduler kubectl"
go get $(for c in $CMDS; do echo "k8s.io/kubernetes/cmd/$c@$K8S_VERSION"; done)
go build -trimpath -tags=selinux,notest -ldflags "$(k8s_ldflags)" -o "$STAGE/" \
  $(for c in $CMDS; do echo "k8s.io/kubernetes/cmd/$c"; done)
{
  first_line "$STAGE/etcd" --version
  first_line "$STAGE/kube-apiserver" --version
  first_line "$STAGE/kwok" --version
  echo "k8s-src: $(k8s_src)"
} >"$STAGE/versions.txt"
finish
