#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl),
# kwok, upstream's mpi-operator and Kueue; with --node, the real node's binaries (kubelet, a minimal
# CoreDNS). From Go modules into a per-machine cache keyed by version. Idempotent: with finished builds it
# only prints the bin dir.
#
# Usage: deploy/local/build.sh                      build if needed, print the control plane's bin dir
#        deploy/local/build.sh --control-plane      only the control plane (what scripts/demo needs)
#        deploy/local/build.sh --kwok               only kwok (fake nodes; its own stamped dir)
#        deploy/local/build.sh --print-kwok-dir     print kwok's bin dir; no build
#        deploy/local/build.sh --node               the same for kubelet + CoreDNS (their own stamped dir)
#        deploy/local/build.sh --print-bin-dir      print the bin dir (no build; exit 1 if not built)
#        deploy/local/build.sh --print-node-bin-dir likewise for the node binaries
#        deploy/local/build.sh --print-k8s-src      print the k8s.io/kubernetes module dir (downloads it if needed)
#        deploy/local/build.sh --print-kueue-dir    print Kueue's dir: bin/kueue, install.yaml (its
#                                                   config/default rendered) and config/; no build
#        deploy/local/build.sh --upstream           build only upstream's mpi-operator (if needed)
#        deploy/local/build.sh --print-upstream-dir print its dir (bin/mpi-operator); no build
#        deploy/local/build.sh --prometheus         build only Prometheus (if needed; for the dashboard picture)
#        deploy/local/build.sh --print-prometheus-dir print its dir (bin/prometheus); no build
# Env:   MPIJOB_K8S_CACHE     cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/mpijob-operator/k8s)
#        MPIJOB_K8S_BIN_DIR   bin dir override (default <cache root>/<versions>/bin)
#        MPIJOB_KWOK_BIN_DIR  kwok's bin dir override (default <cache root>/kwok-<version>/bin)
#        MPIJOB_NODE_BIN_DIR  node bin dir override (default <cache root>/node_<versions>/bin)
#        MPIJOB_KUEUE_DIR     Kueue dir override (default <cache root>/kueue-<version>_mpi-operator-<version>)
#        MPIJOB_UPSTREAM_DIR  upstream mpi-operator dir override (default <cache root>/mpi-operator-<version>)
#        MPIJOB_PROMETHEUS_DIR Prometheus dir override (default <cache root>/prometheus-<version>)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
. "$HERE/versions.env"

CACHE_ROOT=${MPIJOB_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mpijob-operator/k8s}
KEY="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}"
BIN_DIR=${MPIJOB_K8S_BIN_DIR:-$CACHE_ROOT/$KEY/bin}
STAMP=.build-complete
BINARIES="etcd kube-apiserver kube-controller-manager kube-scheduler kubectl"
# kwok has its own stamped dir: the real node's demo needs no fake nodes and skips its build.
KWOK_BIN_DIR=${MPIJOB_KWOK_BIN_DIR:-$CACHE_ROOT/kwok-$KWOK_VERSION/bin}
KUEUE_DIR=${MPIJOB_KUEUE_DIR:-$CACHE_ROOT/kueue-${KUEUE_VERSION}_mpi-operator-$UPSTREAM_MPI_OPERATOR_VERSION}
# The node binaries have their own stamped dir: adding them left the control plane's key (and cache) alone.
UPSTREAM_DIR=${MPIJOB_UPSTREAM_DIR:-$CACHE_ROOT/mpi-operator-$UPSTREAM_MPI_OPERATOR_VERSION}
PROMETHEUS_DIR=${MPIJOB_PROMETHEUS_DIR:-$CACHE_ROOT/prometheus-$PROMETHEUS_VERSION}
NODE_KEY="node_k8s-${K8S_VERSION}_coredns-${COREDNS_VERSION}"
NODE_BIN_DIR=${MPIJOB_NODE_BIN_DIR:-$CACHE_ROOT/$NODE_KEY/bin}

export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}

log() { echo "build.sh: $*" >&2; }
fail() { echo "build.sh: error: $*" >&2; exit 1; }
# print_built DIR [WHAT]: print DIR and exit if a finished build stamped it; else say so and exit 1.
print_built() {
  [ -f "$1/$STAMP" ] || { log "${2:+$2 }not built: $1"; exit 1; }
  echo "$1"
  exit 0
}

go_mod_dir() {
  go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'
}
k8s_src() { go_mod_dir "k8s.io/kubernetes@$K8S_VERSION"; }

MODE=control-plane
case "${1:-}" in
  --print-k8s-src) k8s_src; exit 0 ;;
  --print-bin-dir) print_built "$BIN_DIR" ;;
  --print-kwok-dir) print_built "$KWOK_BIN_DIR" kwok ;;
  --kwok) MODE=kwok ;;
  --print-kueue-dir) print_built "$KUEUE_DIR" Kueue ;;
  --print-upstream-dir) print_built "$UPSTREAM_DIR" "upstream mpi-operator" ;;
  --upstream) MODE=upstream ;;
  --print-prometheus-dir) print_built "$PROMETHEUS_DIR" Prometheus ;;
  --prometheus) MODE=prometheus ;;
  --print-node-bin-dir) print_built "$NODE_BIN_DIR" ;;
  --node) MODE=node ;;
  --control-plane) MODE=control-plane-only ;;
  "") ;;
  *) echo "usage: $0 [--node|--control-plane|--kwok|--print-kwok-dir|--upstream|--print-bin-dir|--print-node-bin-dir|--print-k8s-src|--print-kueue-dir|--print-upstream-dir|--prometheus|--print-prometheus-dir]" >&2; exit 2 ;;
esac

TIMINGS="$CACHE_ROOT/timings"

# locked_build OUT_DIR KEY FUNCTION: unless OUT_DIR carries the stamp, builds it with FUNCTION, which
# fills $STAGE (using the scratch dir $WORK; go output goes to $BUILD_LOG through `stage`). Runs in a
# subshell (own lock fd, trap, variables). One build per OUT_DIR at a time: a second caller waits for the
# lock (naming the holder), then finds the stamp.
locked_build() (
  out=$1 key=$2 fn=$3
  [ -f "$out/$STAMP" ] && exit 0
  command -v go >/dev/null || fail "go not found: install Go >= 1.25 (the build fetches modules from the Go module proxy)"
  mkdir -p "$(dirname "$out")"
  lock="$out.lock"
  exec 9>>"$lock"
  if ! flock -n 9; then
    holder=$(cat "$lock.holder" 2>/dev/null || true)
    log "another build holds $lock (${holder:-holder unknown}); waiting for it"
    waited=0
    until flock -w 60 9; do
      waited=$((waited + 1))
      log "still waiting for the build lock (${waited} min; ${holder:-holder unknown})"
    done
  fi
  echo "pid $$ since $(date -u +%H:%M:%SZ)" >"$lock.holder"
  [ -f "$out/$STAMP" ] && exit 0
  # Everything goes to a temp dir next to the output dir and is renamed in one step at the end, so an
  # interrupted build never leaves a directory that looks finished.
  STAGE=$(mktemp -d "$(dirname "$out")/.$(basename "$out").partial.XXXXXX")
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/mpijob-$key-build.XXXXXX")
  trap 'rm -rf "$WORK" "$STAGE"' EXIT
  BUILD_LOG="$(dirname "$out")/build-$key.log"
  : >"$BUILD_LOG"
  start=$(date +%s)
  log "building $key from the Go module proxy; log: $BUILD_LOG"
  "$fn"
  date -u +%Y-%m-%dT%H:%M:%SZ >"$STAGE/$STAMP"
  rm -rf "$out"
  mv -T "$STAGE" "$out"
  log "built $key in $(($(date +%s) - start))s"
)

# stage NAME TYPICAL_SECONDS FUNCTION: runs FUNCTION with its output in the build log, says how long the
# stage took last time on this machine (or typically, on 2 cores), and on failure ends with one line.
stage() {
  local name=$1 typical=$2 fn=$3 last began rc
  last=$(awk -v n="$name" '$1 == n { t = $2 } END { print t }' "$TIMINGS" 2>/dev/null || true)
  if [ -n "$last" ]; then
    log "building $name (took ${last}s last time on this machine)"
  else
    log "building $name (usually about $(((typical + 59) / 60)) min on 2 cores, longer under load)"
  fi
  began=$(date +%s)
  rc=0
  # In the background, not behind `||`: bash ignores errexit in a function run as the left side of `||`.
  "$fn" >>"$BUILD_LOG" 2>&1 &
  wait $! || rc=$?
  if [ "$rc" != 0 ]; then
    tail -n 15 "$BUILD_LOG" | sed 's/^/    /' >&2
    fail "building $name failed (exit $rc); check that the Go module proxy is reachable (go env GOPROXY) and see $BUILD_LOG"
  fi
  echo "$name $(($(date +%s) - began))" >>"$TIMINGS"
}

build_etcd_at() {
  local ver=$1 mod="$WORK/etcd-$1"
  mkdir -p "$mod" && cd "$mod"
  go mod init local/etcdbin >/dev/null 2>&1
  go get "go.etcd.io/etcd/server/v3@$ver" || return 1
  go build -trimpath -ldflags "-s -w" -o "$STAGE/etcd" go.etcd.io/etcd/server/v3
}

build_etcd() {
  if ! build_etcd_at "$ETCD_VERSION"; then
    echo "etcd $ETCD_VERSION failed, trying $ETCD_VERSION_FALLBACK"
    build_etcd_at "$ETCD_VERSION_FALLBACK"
  fi
}

build_kwok() {
  GOBIN="$STAGE" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
}

k8s_module() {
  go mod init local/k8sbins >/dev/null 2>&1
  local gomod staging m gd
  gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  # Same language version and GODEBUG defaults as upstream's own go.mod.
  go mod edit -go="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod")"
  for gd in $(sed -n 's/^godebug \(.*=.*\)$/\1/p' "$gomod"); do go mod edit -godebug="$gd"; done
  # k8s.io/kubernetes requires its staging modules at v0.0.0 with replace lines that consumers ignore;
  # pin each to the matching published v0.<minor>.<patch>.
  staging="v0.${K8S_VERSION#v1.}"
  for m in $(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => \./staging/.*#\1#p' "$gomod"); do
    go mod edit -replace="$m=$m@$staging"
  done
}
k8s_ldflags() {
  local minor build_date ldf="-s -w" p
  minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldf="$ldf -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ldf="$ldf -X $p.gitTreeState=clean -X $p.buildDate=$build_date"
  done
  echo "$ldf"
}
build_kubernetes() {
  mkdir -p "$WORK/k8s" && cd "$WORK/k8s"
  k8s_module
  local cmds c
  cmds="kube-apiserver kube-controller-manager kube-scheduler kubectl"
  # shellcheck disable=SC2046
  go get $(for c in $cmds; do echo "k8s.io/kubernetes/cmd/$c@$K8S_VERSION"; done)
  # shellcheck disable=SC2046
  go build -trimpath -tags=selinux,notest -ldflags "$(k8s_ldflags)" -o "$STAGE/" \
    $(for c in $cmds; do echo "k8s.io/kubernetes/cmd/$c"; done)
}

build_kubelet() {
  mkdir -p "$WORK/kubelet" && cd "$WORK/kubelet"
  k8s_module
  go get "k8s.io/kubernetes/cmd/kubelet@$K8S_VERSION"
  go build -trimpath -tags=selinux,notest -ldflags "$(k8s_ldflags)" -o "$STAGE/kubelet" \
    k8s.io/kubernetes/cmd/kubelet
}

# CoreDNS with only the plugins deploy/local/coredns/main.go imports (no forward: nothing leaves the machine).
build_coredns() {
  mkdir -p "$WORK/coredns" && cd "$WORK/coredns"
  cp "$HERE/coredns/main.go" .
  go mod init local/coredns >/dev/null 2>&1
  go get "github.com/coredns/coredns@$COREDNS_VERSION"
  go mod tidy
  go build -trimpath -ldflags "-s -w" -o "$STAGE/coredns" .
}

# First lines via parameter expansion, not `| head -1`: under pipefail, head closing the pipe early
# kills the writer with SIGPIPE (exit 141) and with it a finished build.
first_line() { local out; out=$("$@" 2>&1) || true; printf '%s\n' "${out%%$'\n'*}"; }

control_plane() {
  stage "etcd-$ETCD_VERSION" 90 build_etcd
  stage "kubernetes-$K8S_VERSION" 360 build_kubernetes
  for b in $BINARIES; do [ -x "$STAGE/$b" ] || fail "the build made no $b (see $BUILD_LOG)"; done
  {
    first_line "$STAGE/etcd" --version
    first_line "$STAGE/kube-apiserver" --version
    echo "k8s-src: $(k8s_src)"
  } >"$STAGE/versions.txt"
}

# Kueue's module graph lifted by upstream mpi-operator's (MVS: the higher of each version; their k8s.io
# libraries are one patch release apart): the two builds then compile the shared libraries once.
build_kueue() {
  local v=sigs.k8s.io/kueue/pkg/version
  mkdir -p "$STAGE/bin" "$WORK/kueue" && cd "$WORK/kueue"
  go mod init local/kueuebin >/dev/null 2>&1
  go get "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION" \
    "github.com/kubeflow/mpi-operator/cmd/mpi-operator@$UPSTREAM_MPI_OPERATOR_VERSION"
  go build -trimpath \
    -ldflags "-s -w -X $v.GitVersion=$KUEUE_VERSION -X $v.BuildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    -o "$STAGE/bin/kueue" sigs.k8s.io/kueue/cmd/kueue
}

# The manifests of a real install, rendered the way `kubectl apply -k config/default` would (CRDs with
# their conversion webhooks, RBAC, webhook configurations, the manager's Configuration), next to the
# binary of the same version: localcluster adapts them to a process on loopback at run time.
render_kueue_install() {
  local src
  src=$(go_mod_dir "sigs.k8s.io/kueue@$KUEUE_VERSION")
  cp -r "$src/config" "$STAGE/config"
  chmod -R u+w "$STAGE/config"
  "$BIN_DIR/kubectl" kustomize "$STAGE/config/default" >"$STAGE/install.yaml"
}

kueue() {
  stage "kueue-$KUEUE_VERSION" 600 build_kueue
  [ -x "$STAGE/bin/kueue" ] || fail "the build made no kueue (see $BUILD_LOG)"
  stage "kueue-$KUEUE_VERSION-manifests" 10 render_kueue_install
  grep -q '^kind: MutatingWebhookConfiguration' "$STAGE/install.yaml" \
    || fail "Kueue's rendered install.yaml has no webhook configuration (see $BUILD_LOG)"
  echo "kueue $KUEUE_VERSION" >"$STAGE/versions.txt"
}

# Upstream's real operator (the differential tier's oracle), its module built as released: no replace lines.
# Built inside its own module (go.sum as released): `go install mod@version` would also ask the proxy for
# the module's version list (a deprecation check), which the proxy may refuse.
build_upstream() {
  local src
  src=$(go_mod_dir "github.com/kubeflow/mpi-operator@$UPSTREAM_MPI_OPERATOR_VERSION")
  mkdir -p "$STAGE/bin"
  cd "$src"
  go build -mod=readonly -trimpath -ldflags "-s -w" -o "$STAGE/bin/mpi-operator" ./cmd/mpi-operator
}

kwok() {
  stage "kwok-$KWOK_VERSION" 150 build_kwok
  [ -x "$STAGE/kwok" ] || fail "the build made no kwok (see $BUILD_LOG)"
  first_line "$STAGE/kwok" --version >"$STAGE/versions.txt"
}

upstream() {
  stage "mpi-operator-$UPSTREAM_MPI_OPERATOR_VERSION" 300 build_upstream
  [ -x "$STAGE/bin/mpi-operator" ] || fail "the build made no mpi-operator (see $BUILD_LOG)"
  echo "mpi-operator $UPSTREAM_MPI_OPERATOR_VERSION" >"$STAGE/versions.txt"
}

# Prometheus' server for benchmarks/dashboard_picture.py, which evaluates the dashboard's queries through its
# HTTP API. Built inside its module as released, like upstream's operator. remove_all_sd leaves out every
# service discovery but static targets (most of its dependencies); without the builtinassets tag there is
# no web UI, only the API.
build_prometheus() {
  local src v=github.com/prometheus/common/version
  src=$(go_mod_dir "github.com/prometheus/prometheus@$PROMETHEUS_VERSION")
  mkdir -p "$STAGE/bin"
  cd "$src"
  # GOWORK=off: the module ships a go.work naming modules its zip leaves out.
  GOWORK=off go build -mod=readonly -trimpath -tags remove_all_sd \
    -ldflags "-s -w -X $v.Version=$PROMETHEUS_VERSION -X $v.BuildDate=$(date -u +%Y%m%d-%H:%M:%S)" \
    -o "$STAGE/bin/prometheus" ./cmd/prometheus
}

prometheus() {
  stage "prometheus-$PROMETHEUS_VERSION" 600 build_prometheus
  [ -x "$STAGE/bin/prometheus" ] || fail "the build made no prometheus (see $BUILD_LOG)"
  first_line "$STAGE/bin/prometheus" --version >"$STAGE/versions.txt"
}

node_binaries() {
  stage "coredns-$COREDNS_VERSION" 120 build_coredns
  stage "kubelet-$K8S_VERSION" 60 build_kubelet
  for b in kubelet coredns; do [ -x "$STAGE/$b" ] || fail "the build made no $b (see $BUILD_LOG)"; done
  {
    first_line "$STAGE/kubelet" --version
    first_line "$STAGE/coredns" -version
  } >"$STAGE/versions.txt"
}

# build_alone OUT_DIR KEY FUNCTION: one part on its own (--node, --prometheus, --kwok, --upstream): build
# it if needed, print its dir and exit.
build_alone() {
  locked_build "$1" "$2" "$3"
  echo "$1"
  exit 0
}
case "$MODE" in
  node) build_alone "$NODE_BIN_DIR" "$NODE_KEY" node_binaries ;;
  prometheus) build_alone "$PROMETHEUS_DIR" "prometheus-$PROMETHEUS_VERSION" prometheus ;;
  kwok) build_alone "$KWOK_BIN_DIR" "kwok-$KWOK_VERSION" kwok ;;
  upstream) build_alone "$UPSTREAM_DIR" "mpi-operator-$UPSTREAM_MPI_OPERATOR_VERSION" upstream ;;
esac
locked_build "$BIN_DIR" "$KEY" control_plane
if [ "$MODE" != control-plane-only ]; then
  locked_build "$KWOK_BIN_DIR" "kwok-$KWOK_VERSION" kwok
  locked_build "$UPSTREAM_DIR" "mpi-operator-$UPSTREAM_MPI_OPERATOR_VERSION" upstream
  locked_build "$KUEUE_DIR" "kueue-$KUEUE_VERSION" kueue
fi
echo "$BIN_DIR"
