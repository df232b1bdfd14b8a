"""Run the operator on a local cluster with the pi example until it succeeds (see scripts/demo)."""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from kubernetes import client, config, utils

from localcluster import BinariesMissing, StartupError
from localcluster.cluster import STATE_FILE, ClusterSpec, LocalCluster, terminate_on_signals, wait_for_crds
from localcluster.kubectl import KubectlFailed
from localcluster.kubectl import kubectl as run_kubectl
from localcluster.operator import OperatorExited, OperatorRunner, stop_recorded
from localcluster.sandbox import NODE_LABEL, NodeUnavailable, RealCluster, check_host
from localcluster.sandbox.layout import MAX_NODES
from localcluster.sandbox.seal import attach

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "pi.yaml"
# Keyed by the checkout, so two checkouts' demos never stop each other's cluster. Under the temp dir, not
# in the checkout: unix socket paths of the cluster's components must stay short.
_CHECKOUT_KEY = hashlib.sha256(str(ROOT).encode()).hexdigest()[:8]
STATE_DIR = Path(tempfile.gettempdir()) / f"mpijob-demo-{os.getuid()}-{_CHECKOUT_KEY}"
OPERATOR_PID = STATE_DIR / "operator.pid"
OPERATOR_LOG = STATE_DIR / "operator.log"
SA_USER = "system:serviceaccount:mpi-operator:mpi-operator"
READY_TIMEOUT = 60.0


class DemoError(Exception):
    """An expected failure: printed as one line saying what failed and what to do, exit 1."""


def shown(path: Path) -> str:
    """A path as the user would type it: relative to the checkout when inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def say(msg: str) -> None:
    print(f"==> {msg}", flush=True)


def kubectl(cluster: LocalCluster, *args: str) -> None:
    """The cluster's kubectl, its output shown; a failure is the demo's error, with kubectl's last line."""
    try:
        proc = run_kubectl(cluster, *args)
    except KubectlFailed as err:
        detail = (err.proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise DemoError(f"kubectl {' '.join(args)} failed: {detail}") from None
    if proc.stdout:
        print(proc.stdout, end="", flush=True)


def start_operator(cluster: LocalCluster, *, detached: bool) -> OperatorRunner:
    """The operator as the mpi-operator ServiceAccount, through the runner the tests use; ready means
    leading with every informer cache synced. An exit before that is the demo's failure."""
    OPERATOR_LOG.unlink(missing_ok=True)  # this run's log only
    op = OperatorRunner(cluster.write_user_kubeconfig(SA_USER), OPERATOR_LOG, detached=detached, repo=ROOT)
    try:
        op.start(timeout=READY_TIMEOUT)
    except OperatorExited as err:
        last = (OPERATOR_LOG.read_text(errors="replace").strip().splitlines() or ["(no output)"])[-1]
        raise DemoError(
            f"the operator exited with code {op.returncode()}: {last} (log: {OPERATOR_LOG})"
        ) from err
    except TimeoutError as err:
        op.stop()
        raise DemoError(
            f"the operator was not ready within {READY_TIMEOUT:.0f}s (log: {OPERATOR_LOG})"
        ) from err
    op.record(OPERATOR_PID)  # for --down: the PID and its start time, so only this process is stopped
    say(f"operator running as {SA_USER} (pid {op.pid}, log {OPERATOR_LOG}, metrics :{op.port}/metrics)")
    return op


def stop_operator() -> None:
    stop_recorded(OPERATOR_PID)


def example_objects(path: Path) -> list[dict]:
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    except (OSError, yaml.YAMLError) as err:
        raise DemoError(f"cannot read the example {path}: {err}") from err
    for doc in docs:
        if not (isinstance(doc, dict) and isinstance(doc.get("metadata"), dict) and doc.get("kind")):
            raise DemoError(f"{path} holds a document that is not a Kubernetes object with kind and metadata")
        doc["metadata"].setdefault("namespace", "default")
    return docs


def load_example(path: Path = EXAMPLE) -> dict:
    """The one MPIJob of an example file."""
    jobs = [d for d in example_objects(path) if d["kind"] == "MPIJob"]
    if len(jobs) != 1:
        raise DemoError(f"{path} holds {len(jobs)} MPIJobs; the demo runs a file with exactly one")
    return jobs[0]


def companions(path: Path) -> list[dict]:
    """The example's other objects (an input ConfigMap, say): created before its MPIJob."""
    return [d for d in example_objects(path) if d["kind"] != "MPIJob"]


def describe(job: dict, pods: list[dict]) -> str:
    conds = [c["type"] for c in job.get("status", {}).get("conditions", []) if c.get("status") == "True"]
    parts = [f"{p['metadata']['name']} {p.get('status', {}).get('phase', '?')}" for p in pods]
    return f"conditions: {', '.join(conds) or '-'} | pods: {', '.join(parts) or '-'}"


def follow(api: client.ApiClient, name: str, namespace: str, timeout: float) -> tuple[bool, str]:
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    began = time.monotonic()
    last = ""
    finished: tuple[bool, str] | None = None
    while time.monotonic() - began < timeout:
        job = custom.get_namespaced_custom_object("kubeflow.org", "v2beta1", namespace, "mpijobs", name)
        pods = api.sanitize_for_serialization(
            core.list_namespaced_pod(namespace, label_selector=f"training.kubeflow.org/job-name={name}").items
        )
        line = describe(job, sorted(pods, key=lambda p: p["metadata"]["name"]))
        if line != last:
            print(f"[{time.monotonic() - began:6.1f}s] {line}", flush=True)
            last = line
        for cond in job.get("status", {}).get("conditions", []):
            if cond["type"] in ("Succeeded", "Failed") and cond["status"] == "True":
                finished = finished or (
                    cond["type"] == "Succeeded",
                    f"{cond['type']}: {cond.get('message', '')}",
                )
        # After the end, show the cleanup (cleanPodPolicy) before the final line.
        workers_left = any(p["metadata"]["name"].startswith(f"{name}-worker-") for p in pods)
        if finished and (not workers_left or time.monotonic() - began > timeout):
            return finished
        time.sleep(0.5)
    return finished or (False, f"timed out after {timeout:.0f}s")


# -- the real node (default where the machine allows it; --kwok skips it) ---------------------------------
REAL_CPU = "500m"  # launcher + 2 workers must fit the machine's 2 CPUs


BUILD_SH = ROOT / "deploy" / "local" / "build.sh"


def go_builds(parts: tuple[str, ...]) -> str:
    """deploy/local/build.sh for each part in turn (Go builds, cached per machine; progress on stderr).
    Returns the part that failed ("" if none did)."""
    for part in parts:
        if subprocess.run([str(BUILD_SH), part], stdout=subprocess.DEVNULL, check=False).returncode:
            return part
    return ""


def prepare_real_node(images: tuple[str, ...]) -> str:
    """The real node's Debian packages and the images it runs, built or installed once per machine (later
    runs take seconds). Returns why the machine cannot run it ("" if it can)."""
    try:
        subprocess.run([str(ROOT / "deploy" / "local" / "node-packages.sh")], check=True, stdout=sys.stderr)
        check_host()
        from localcluster.images.build import build_images

        build_images(images)
    except NodeUnavailable as err:
        return str(err)
    except subprocess.CalledProcessError as err:
        return f"{Path(str(err.cmd[0])).name} failed with exit {err.returncode}"
    except (OSError, RuntimeError, ValueError) as err:
        return f"{type(err).__name__}: {err}"
    return ""


def prepare(job: dict, *, kwok: bool) -> str:
    """Everything the cluster needs, first run only: the Go builds (control plane; kubelet and CoreDNS for
    a real node) run beside the real node's packages and images, which mostly wait on downloads. Returns
    why there is no real node ("" if there is one)."""
    why = "--kwok" if kwok else ""
    if not why and os.geteuid() != 0:
        why = "not root (the kubelet, containerd and the pod network need root)"
    parts = ("--control-plane", "--kwok") if why else ("--control-plane", "--node")
    images = job_images(job)
    building = (
        "the control plane and kwok (Go)"
        if why
        else "the control plane, kubelet, CoreDNS (Go) and " + ", ".join(images)
    )
    say(f"{building}: built on the first run, cached after")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        go = pool.submit(go_builds, parts)
        if not why:
            why = prepare_real_node(images)
        failed = go.result()
    if failed in ("--control-plane", "--kwok"):
        what = "the control plane" if failed == "--control-plane" else "kwok"
        raise DemoError(f"building {what} failed (build.sh's error is above)")
    if failed and not why:
        why = "building kubelet and CoreDNS failed (build.sh's error is above)"
    return why


def fall_back_to_kwok(why: str) -> None:
    """Says why there is no real node and builds kwok for the fake nodes (a real node's build skips it)."""
    say(f"no real node: {why}; falling back to kwok fake nodes (pods do not really run)")
    if go_builds(("--kwok",)):
        raise DemoError("building kwok failed (build.sh's error is above)")


def on_real_node(job: dict) -> dict:
    """A copy of the example as the real node can run it. An example whose images are all built here
    (the applications) runs as written; upstream's pi gets the pi image built here and limits that fit
    2 CPUs."""
    from localcluster.images.build import image_names

    as_written = runs_as_written(job)
    job = copy.deepcopy(job)
    image = image_names()["openmpi-nonroot"]
    for spec in job["spec"]["mpiReplicaSpecs"].values():
        pod = spec["template"]["spec"]
        pod["nodeSelector"] = {NODE_LABEL: "true"}
        for c in pod["containers"]:
            c["imagePullPolicy"] = "IfNotPresent"
            if not as_written:
                c["image"] = image
                c["resources"] = {"limits": {"cpu": REAL_CPU, "memory": "512Mi"}}
    return job


def runs_as_written(job: dict) -> bool:
    """Every image of the job is one `localcluster images` builds."""
    from localcluster.images.build import image_names

    return set(job_images(job)) <= set(image_names().values())


def job_images(job: dict) -> tuple[str, ...]:
    """The images an MPIJob's pods run: what the real node must have."""
    return tuple(
        sorted(
            {
                c["image"]
                for spec in job["spec"]["mpiReplicaSpecs"].values()
                for key in ("initContainers", "containers")
                for c in spec["template"]["spec"].get(key, [])
            }
        )
    )


def print_launcher_output(api: client.ApiClient, name: str, namespace: str) -> None:
    core = client.CoreV1Api(api)
    pods = core.list_namespaced_pod(
        namespace,
        label_selector=f"training.kubeflow.org/job-name={name},training.kubeflow.org/job-role=launcher",
    ).items
    if not pods:
        return
    newest = max(pods, key=lambda p: p.metadata.creation_timestamp)
    log = core.read_namespaced_pod_log(newest.metadata.name, namespace)
    say(f"the launcher's output (kubectl logs {newest.metadata.name}):")
    for line in log.splitlines():
        if not line.startswith("Warning: Permanently added"):
            print(f"    {line}")


def down() -> int:
    stop_operator()
    if (STATE_DIR / "cluster" / STATE_FILE).exists():
        attach(STATE_DIR / "cluster").stop()
    say("stopped the operator and the local cluster")
    return 0


def main() -> int:
    try:
        return run()
    except DemoError as err:
        print(f"demo: error: {err}", file=sys.stderr, flush=True)
    except BinariesMissing as err:
        print(f"demo: error: {err} (scripts/demo runs it for you)", file=sys.stderr, flush=True)
    except StartupError as err:
        first = str(err).splitlines()[0]
        print(
            f"demo: error: the local cluster did not start: {first} (logs: {STATE_DIR / 'cluster'})",
            file=sys.stderr,
            flush=True,
        )
    except client.ApiException as err:
        print(f"demo: error: the API server answered {err.status} {err.reason}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print("demo: interrupted; stopped what this run started", file=sys.stderr, flush=True)
    return 1


def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keep", action="store_true", help="keep the cluster and operator running")
    parser.add_argument("--down", action="store_true", help="stop what --keep left running")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the job")
    parser.add_argument("--kwok", action="store_true", help="fake nodes only (fast; pods do not really run)")
    parser.add_argument(
        "--nodes", type=int, default=1, help="real nodes (each its own kubelet and containerd)"
    )
    parser.add_argument(
        "--example",
        default=str(EXAMPLE),
        help="a file with one MPIJob and the objects it needs (default: examples/pi.yaml)",
    )
    args = parser.parse_args()
    if not 1 <= args.nodes <= MAX_NODES:
        parser.error(f"--nodes must be 1 to {MAX_NODES}")
    if args.down:
        return down()
    if (STATE_DIR / "cluster" / STATE_FILE).exists():
        say("a previous demo is still running; stopping it first")
        down()
    STATE_DIR.mkdir(parents=True, exist_ok=True)

    tier = "l2"
    example = Path(args.example).resolve()
    job = load_example(example)
    real_job = on_real_node(job)
    why = prepare(real_job, kwok=args.kwok)
    if not why:
        tier = "real"
    elif not args.kwok:
        fall_back_to_kwok(why)
    if tier == "real":
        nodes = "one real node" if args.nodes == 1 else f"{args.nodes} real nodes"
        say(f"starting the local cluster: etcd, kube-apiserver, controller-manager, scheduler, {nodes}")
        spec = ClusterSpec(
            tier="real",
            nodes=0,
            real_nodes=args.nodes,
            startup_timeout=180,
            node_images=job_images(real_job),
        )
    else:
        say("starting the local cluster: etcd, kube-apiserver, controller-manager, scheduler, kwok (2 nodes)")
        spec = ClusterSpec(tier="l2", nodes=2)
    cluster_type = RealCluster if tier == "real" else LocalCluster
    cluster = cluster_type(spec, work_dir=STATE_DIR / "cluster", detached=args.keep)
    ok = started = False
    with terminate_on_signals():
        try:
            began = time.monotonic()
            try:
                cluster.start()
            except NodeUnavailable as err:  # e.g. no root, no overlayfs
                fall_back_to_kwok(str(err))
                cluster = LocalCluster(
                    ClusterSpec(tier="l2", nodes=2), work_dir=STATE_DIR / "cluster", detached=args.keep
                )
                tier = "l2"
                cluster.start()
            say(f"cluster ready in {time.monotonic() - began:.1f}s")
            say("installing the CRD and RBAC: kubectl apply --server-side -k deploy/base-no-operator")
            kubectl(cluster, "apply", "--server-side", "-k", str(ROOT / "deploy" / "base-no-operator"))
            with cluster.api_client() as admin:
                try:
                    wait_for_crds(admin, ["mpijobs.kubeflow.org"])
                except TimeoutError as err:
                    raise DemoError(f"{err}; see the API server log in {cluster.log_dir}") from err
            start_operator(cluster, detached=args.keep)
            started = True
            if tier == "real":
                limits = "as the example sets them" if runs_as_written(job) else f"{REAL_CPU} a pod"
                job = real_job
                image = ", ".join(job_images(job))
                say(f"on {nodes}: image {image} (built here), cpu limits {limits}")
            name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
            api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
            for obj in companions(example):
                say(f"creating {obj['kind'].lower()}/{obj['metadata']['name']} from {shown(example)}")
                utils.create_from_dict(api, obj, namespace=obj["metadata"]["namespace"])
            say(f"submitting {shown(example)} as {namespace}/{name}")
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                "kubeflow.org", "v2beta1", namespace, "mpijobs", job
            )
            ok, final = follow(api, name, namespace, args.timeout)
            say(f"MPIJob {namespace}/{name} {final}")
            if tier == "real":
                print_launcher_output(api, name, namespace)
            if not ok:
                say(f"operator log: {OPERATOR_LOG}")
        finally:
            if args.keep and started:
                env = cluster.env()
                say("the cluster and operator keep running. Look around with:")
                print(f"    export KUBECONFIG={env['KUBECONFIG']}")
                print(f"    export PATH={cluster.bin_dir}:$PATH")
                print("    kubectl get mpijobs,jobs,pods,svc,cm,secrets -A")
                print(f"    kubectl delete mpijob {job['metadata']['name']}")
                print(f"    kubectl apply -f {shown(example)}   # or your own MPIJob")
                print(f"  operator log: {OPERATOR_LOG}")
                print("  stop everything with: scripts/demo --down")
            else:
                stop_operator()
                cluster.stop(keep_logs=not ok)  # a failed run keeps the components' logs to read
                say("stopped the operator and the local cluster")
                if ok:
                    print("  to look around or submit your own MPIJobs, run `scripts/demo --keep`; it prints")
                    print(
                        "  the kubectl set-up (KUBECONFIG, PATH) and `scripts/demo --down` stops it all after"
                    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
