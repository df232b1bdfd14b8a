"""What upstream mpi-operator v0.8.2 would have for an MPIJob after one sync: its children and its status.

A model of upstream's behaviour as described in the reference (sections 2.2-2.8), written for one purpose: to
compare with the golden cases, so that every field where ours differs is found mechanically
(tests/unit/test_upstream_differences.py). It models what the golden cases exercise; it is not a controller.
Conventions: the SSH key is the same as ours (upstream's is random), "now" is the case's clock (upstream
reads the wall clock), and validity is ours (the golden `invalid` case is invalid for both).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from render import quantity
from render.api import managed_externally
from render.errors import ValidationError
from render.parse import parse_mpijob

GROUP_VERSION = "kubeflow.org/v2beta1"
OPERATOR = "training.kubeflow.org/operator-name"
JOB_NAME = "training.kubeflow.org/job-name"
ROLE = "training.kubeflow.org/job-role"
INDEX = "training.kubeflow.org/replica-index"
CONNECT = "-o ConnectionAttempts=10"
HOSTFILE = "/etc/mpi/hostfile"


class Model:
    def __init__(
        self, mpijob: Mapping[str, Any], objects: list[dict[str, Any]], cluster_domain: str, gang: str
    ):
        self.raw = mpijob
        self.meta = mpijob["metadata"]
        self.name, self.ns, self.uid = (
            self.meta["name"],
            self.meta.get("namespace", "default"),
            self.meta["uid"],
        )
        self.spec = _defaulted(mpijob["spec"])
        self.run_policy = self.spec["runPolicy"]
        self.domain, self.gang = cluster_domain, gang
        self.objects = {
            (o["kind"], o["metadata"]["name"]): o
            for o in objects
            if o["metadata"].get("namespace", self.ns) == self.ns
        }

    # ------------------------------------------------------------------------------------------ helpers
    @property
    def suspended(self) -> bool:
        return bool(self.run_policy.get("suspend"))

    @property
    def as_worker(self) -> bool:
        return bool(self.spec.get("runLauncherAsWorker"))

    @property
    def workers(self) -> int:
        w = self.spec["mpiReplicaSpecs"].get("Worker")
        return int(w.get("replicas", 0)) if w else 0

    def owned(self, kind: str, name: str) -> dict[str, Any] | None:
        obj = self.objects.get((kind, name))
        return obj if obj is not None and _controller_uid(obj) == self.uid else None

    def foreign(self, kind: str, name: str) -> bool:
        return (kind, name) in self.objects and self.owned(kind, name) is None

    def owner_refs(self) -> list[dict[str, Any]]:
        return [
            {
                "apiVersion": GROUP_VERSION,
                "blockOwnerDeletion": True,
                "controller": True,
                "kind": "MPIJob",
                "name": self.name,
                "uid": self.uid,
            }
        ]

    def fqdn(self, host: str) -> str:
        out = f"{host}.{self.name}.{self.ns}.svc"
        return f"{out}.{self.domain}" if self.domain else out

    def launcher_job(self) -> dict[str, Any] | None:
        return self.owned("Job", f"{self.name}-launcher")

    def launcher_pods(self, job: Mapping[str, Any]) -> list[dict[str, Any]]:
        uid = job["metadata"].get("uid")
        return [o for (k, _), o in self.objects.items() if k == "Pod" and uid and _controller_uid(o) == uid]

    def worker_pod(self, i: int) -> dict[str, Any] | None:
        return self.owned("Pod", f"{self.name}-worker-{i}")

    def finished(self, status: Mapping[str, Any]) -> bool:
        return any(
            c.get("type") in ("Succeeded", "Failed") and c.get("status") == "True"
            for c in status.get("conditions") or ()
        )

    def skipped(self) -> bool:
        """Upstream does nothing for a job another controller manages, and only emits an event for an
        invalid one: no children, no status."""
        if managed_externally(self.run_policy.get("managedBy") or ""):
            return True
        try:
            parse_mpijob(self.raw)
        except ValidationError:
            return True
        return False

    def conflict(self) -> bool:
        """Upstream stops its sync at the first child name held by an object it does not control."""
        names = [
            ("Job", f"{self.name}-launcher"),
            ("Service", self.name),
            ("ConfigMap", f"{self.name}-config"),
        ]
        names += [("Secret", f"{self.name}-ssh")] + [
            ("Pod", f"{self.name}-worker-{i}") for i in range(self.workers)
        ]
        return any(self.foreign(k, n) for k, n in names)

    # ---------------------------------------------------------------------------------------- children
    def children(self, now: str) -> list[dict[str, Any]]:
        """The children that exist once upstream's syncs settle (the one that sees the launcher finish and
        the next, which cleans up), each as upstream builds it."""
        if self.skipped() or self.conflict():
            return []
        st = self.status(now)
        cleaned = self.finished(st) and st.get("completionTime") and _cleans(self.run_policy)
        launcher = self.launcher_job()
        job_done = launcher is not None and (
            _cond_true(launcher, "Complete") or _cond_true(launcher, "Failed")
        )
        out = [self.service(), self.config_map(), self.secret()]
        if self.gang and not self.suspended and not cleaned:
            out.append(self.pod_group())
        if not self.suspended:
            for i in range(self.workers):
                pod = self.worker_pod(i)
                if pod is None and (job_done or self.finished(st)):
                    continue  # nothing is created once the launcher has finished
                if pod is not None and cleaned and _deleted_by_cleanup(self.run_policy, pod):
                    continue
                out.append(self.worker(i))
        if launcher is not None:
            out.append(
                self.launcher(suspend=self.suspended if not job_done else launcher["spec"].get("suspend"))
            )
        elif self.spec["launcherCreationPolicy"] == "AtStartup" or all(
            _ready(self.worker_pod(i)) for i in range(self.workers) if not self.suspended
        ):
            out.append(self.launcher(suspend=self.suspended))
        return out

    def _labelled(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"] = {
            "labels": {"app": self.name},
            "name": obj["metadata"]["name"],
            "namespace": self.ns,
            "ownerReferences": self.owner_refs(),
        }
        return obj

    def service(self) -> dict[str, Any]:
        spec = {
            "clusterIP": "None",
            "publishNotReadyAddresses": self.as_worker,
            "selector": {OPERATOR: "mpi-operator", JOB_NAME: self.name},
        }
        return self._labelled(
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": self.name}, "spec": spec}
        )

    def config_map(self) -> dict[str, Any]:
        slots = self.spec["slotsPerWorker"]
        fmt = "{} slots={}" if self.spec["mpiImplementation"] == "OpenMPI" else "{}:{}"
        hosts = ([f"{self.name}-launcher"] if self.as_worker else []) + [
            f"{self.name}-worker-{i}" for i in range(self.workers)
        ]
        hostfile = "".join(fmt.format(self.fqdn(h), slots) + "\n" for h in hosts)
        running = sorted(
            o["metadata"]["name"]
            for (k, n), o in self.objects.items()
            if k == "Pod"
            and _controller_uid(o) == self.uid
            and (o["metadata"].get("labels") or {}).get(ROLE) == "worker"
            and (o.get("status") or {}).get("phase") == "Running"
        )  # sorted as strings, as upstream
        discover = "#!/bin/sh\n" + (
            "echo " + self.fqdn(f"{self.name}-launcher") + "\n" if self.as_worker else ""
        )
        discover += "".join(f"echo {self.fqdn(n)}\n" for n in running)
        data = {"discover_hosts.sh": discover, "hostfile": hostfile}
        return self._labelled(
            {
                "apiVersion": "v1",
                "data": data,
                "kind": "ConfigMap",
                "metadata": {"name": f"{self.name}-config"},
            }
        )

    def secret(self) -> dict[str, Any]:
        return self._labelled(
            {
                "apiVersion": "v1",
                "data": "<key>",  # random upstream; the same key material as ours by convention
                "kind": "Secret",
                "metadata": {"name": f"{self.name}-ssh"},
                "type": "kubernetes.io/ssh-auth",
            }
        )

    def pod_group(self) -> dict[str, Any]:
        sp = self.run_policy.get("schedulingPolicy") or {}
        min_member = sp.get("minAvailable", self.workers + 1)
        min_resources = sp.get("minResources")
        if min_resources is None and min_member != 0:
            min_resources = self._min_resources(min_member)
        if self.gang == "volcano":
            queue = sp.get("queue") or (self.meta.get("annotations") or {}).get(
                "scheduling.volcano.sh/queue-name"
            )
            specs = self.spec["mpiReplicaSpecs"]
            pcn = sp.get("priorityClass") or next(
                (
                    specs[r]["template"]["spec"].get("priorityClassName")
                    for r in ("Launcher", "Worker")
                    if r in specs and specs[r]["template"]["spec"].get("priorityClassName")
                ),
                None,
            )
            spec = {
                "minMember": min_member,
                "minResources": min_resources,
                "priorityClassName": pcn,
                "queue": queue,
            }
            api = "scheduling.volcano.sh/v1beta1"
        else:
            timeout = sp.get("scheduleTimeoutSeconds", 0)
            spec = {"minMember": min_member, "minResources": min_resources, "scheduleTimeoutSeconds": timeout}
            api = "scheduling.x-k8s.io/v1alpha1"
        spec = {k: v for k, v in spec.items() if v not in (None, "", {})}
        obj = {"apiVersion": api, "kind": "PodGroup", "metadata": {"name": self.name}, "spec": spec}
        obj = self._labelled(obj)
        del obj["metadata"]["labels"]  # upstream's PodGroup has no labels
        return obj

    def _min_resources(self, min_member: int) -> dict[str, str]:
        def priority(rtype: str) -> int:
            pcn = self.spec["mpiReplicaSpecs"][rtype]["template"]["spec"].get("priorityClassName")
            pc = self.objects.get(("PriorityClass", pcn)) if pcn else None
            return int(pc.get("value", 0)) if pc else 0

        order = sorted(self.spec["mpiReplicaSpecs"], key=priority, reverse=True)
        replicas = {r: int(self.spec["mpiReplicaSpecs"][r].get("replicas", 1)) for r in order}
        if len(order) > 1 and sum(replicas.values()) > min_member:
            cut = "Worker" if priority(order[0]) == priority(order[1]) else order[1]
            replicas[cut] = min_member - 1
        total: dict[str, tuple[Fraction, bool]] = {}
        for r in order:
            for c in self.spec["mpiReplicaSpecs"][r]["template"]["spec"]["containers"]:
                res = c.get("resources") or {}
                merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
                for name, q in merged.items():
                    value, binary = quantity.parse(q)
                    old = total.get(name, (Fraction(0), binary))
                    total[name] = (old[0] + value * replicas[r], old[1] or binary)
        return {k: quantity.format_quantity(v, b) for k, (v, b) in total.items()}

    def _decorate(self, template: dict[str, Any]) -> None:
        if not self.gang:
            return
        template["spec"]["schedulerName"] = self.gang
        if self.gang == "volcano":
            template.setdefault("metadata", {}).setdefault("annotations", {})[
                "scheduling.k8s.io/group-name"
            ] = self.name
        else:
            template.setdefault("metadata", {}).setdefault("labels", {})["scheduling.x-k8s.io/pod-group"] = (
                self.name
            )

    def _ssh(self, pod_spec: dict[str, Any]) -> None:
        secret: dict[str, Any] = {
            "items": [
                {"key": "ssh-privatekey", "path": "id_rsa"},
                {"key": "ssh-publickey", "path": "id_rsa.pub"},
                {"key": "ssh-publickey", "path": "authorized_keys"},
            ],
            "secretName": f"{self.name}-ssh",
        }
        if self.spec["sshAuthMountPath"] == "/root/.ssh":
            secret["defaultMode"] = 0o600
        pod_spec.setdefault("volumes", []).append({"name": "ssh-auth", "secret": secret})
        mounts = pod_spec["containers"][0].setdefault("volumeMounts", [])
        mounts.append({"mountPath": self.spec["sshAuthMountPath"], "name": "ssh-auth"})

    def worker(self, i: int) -> dict[str, Any]:
        name = f"{self.name}-worker-{i}"
        rs = self.spec["mpiReplicaSpecs"]["Worker"]
        t = copy.deepcopy(rs["template"])
        t.setdefault("metadata", {})
        t["metadata"]["labels"] = {
            **(t["metadata"].get("labels") or {}),
            OPERATOR: "mpi-operator",
            JOB_NAME: self.name,
            ROLE: "worker",
            INDEX: str(i + 1 if self.as_worker else i),
        }
        spec = t["spec"]
        spec["hostname"], spec["subdomain"] = name, self.name
        if spec.get("hostNetwork"):
            spec["dnsPolicy"] = "ClusterFirstWithHostNet"
        dns = spec.setdefault("dnsConfig", {})
        dns["searches"] = [*dns.get("searches", []), f"{self.name}.{self.ns}.svc.cluster.local"]  # hard-coded
        spec["restartPolicy"] = rs.get("restartPolicy", "Never")
        c = spec["containers"][0]
        if not c.get("command") and not c.get("args"):
            c["command"] = ["/usr/sbin/sshd", "-De"]
        c["env"] = [*c.get("env", []), {"name": "K_MPI_JOB_ROLE", "value": "worker"}]
        self._ssh(spec)
        self._decorate(t)
        meta = {"labels": t["metadata"]["labels"], "name": name, "namespace": self.ns}
        if t["metadata"].get("annotations"):
            meta["annotations"] = t["metadata"]["annotations"]
        meta["ownerReferences"] = self.owner_refs()
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}

    def launcher(self, suspend: bool) -> dict[str, Any]:
        rs = self.spec["mpiReplicaSpecs"]["Launcher"]
        t = copy.deepcopy(rs["template"])
        t.setdefault("metadata", {})
        t["metadata"]["labels"] = {
            **(t["metadata"].get("labels") or {}),
            OPERATOR: "mpi-operator",
            JOB_NAME: self.name,
            ROLE: "launcher",
        }
        self._decorate(t)
        if self.as_worker:
            t["metadata"]["labels"][INDEX] = "0"
        spec = t["spec"]
        spec["hostname"], spec["subdomain"] = f"{self.name}-launcher", self.name
        if spec.get("hostNetwork"):
            spec["dnsPolicy"] = "ClusterFirstWithHostNet"
        c = spec["containers"][0]
        slots = str(self.spec["slotsPerWorker"])
        env = [{"name": "K_MPI_JOB_ROLE", "value": "launcher"}]
        impl = self.spec["mpiImplementation"]
        if impl == "OpenMPI":
            env += _env(
                OMPI_MCA_orte_keep_fqdn_hostnames="true",
                OMPI_MCA_orte_default_hostfile=HOSTFILE,
                OMPI_MCA_plm_rsh_args=CONNECT,
                OMPI_MCA_orte_set_default_slots=slots,
            )
        elif impl == "Intel":
            env += _env(
                I_MPI_HYDRA_HOST_FILE=HOSTFILE,
                I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS=CONNECT,
                I_MPI_PERHOST=slots,
            )
        else:
            env += _env(HYDRA_HOST_FILE=HOSTFILE, HYDRA_LAUNCH_EXTRA_ARGS=CONNECT)
        if not self.as_worker:
            env += [{"name": "NVIDIA_VISIBLE_DEVICES"}, {"name": "NVIDIA_DRIVER_CAPABILITIES"}]
        c["env"] = [*c.get("env", []), *env]
        self._ssh(spec)
        spec["restartPolicy"] = rs.get("restartPolicy", "OnFailure")
        spec["volumes"].append(
            {
                "configMap": {
                    "items": [
                        {"key": "hostfile", "mode": 0o444, "path": "hostfile"},
                        {"key": "discover_hosts.sh", "mode": 0o555, "path": "discover_hosts.sh"},
                    ],
                    "name": f"{self.name}-config",
                },
                "name": "mpi-job-config",
            }
        )
        c["volumeMounts"].append({"mountPath": "/etc/mpi", "name": "mpi-job-config"})
        template_meta: dict[str, Any] = {"labels": t["metadata"]["labels"]}
        if t["metadata"].get("annotations"):
            template_meta["annotations"] = t["metadata"]["annotations"]
        template_meta["ownerReferences"] = self.owner_refs()  # upstream's quirk
        job_spec: dict[str, Any] = {
            "podReplacementPolicy": "Failed",
            "suspend": bool(suspend),  # upstream leaves it unset when false; the API server stores false
            "template": {"metadata": template_meta, "spec": spec},
        }
        for key in ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit"):
            if key in self.run_policy:
                job_spec[key] = self.run_policy[key]
        obj = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"{self.name}-launcher"}}
        obj["spec"] = job_spec
        return self._labelled(obj)

    # ------------------------------------------------------------------------------------------ status
    def status(self, now: str) -> dict[str, Any]:
        original = copy.deepcopy(self.raw.get("status") or {})
        if self.skipped():
            return original
        st = copy.deepcopy(original)
        conds: list[dict[str, Any]] = st.get("conditions") or []
        nsn = f"{self.ns}/{self.name}"

        def setc(ctype: str, status: str, reason: str, message: str) -> bool:
            nonlocal conds
            conds, changed = _set_condition(conds, ctype, status, reason, message, now)
            return changed

        if not conds:
            setc("Created", "True", "MPIJobCreated", f"MPIJob {nsn} is created.")
        if self.finished({"conditions": conds}) and st.get("completionTime"):
            if _cleans(self.run_policy):
                st.setdefault("replicaStatuses", {})["Worker"] = {}
            st["conditions"] = conds
            return st
        if self.conflict():
            return original  # the sync returns an error before the status write
        if "startTime" not in st and not self.suspended:
            st["startTime"] = now
        launcher = self.launcher_job()
        done = launcher is not None and (_cond_true(launcher, "Complete") or _cond_true(launcher, "Failed"))
        workers: list[dict[str, Any]] = []
        if not done and not self.suspended:
            workers = [self.worker_pod(i) or {"status": {}} for i in range(self.workers)]
        creates = self.spec["launcherCreationPolicy"] == "AtStartup" or all(_ready(p) for p in workers)
        if launcher is None and not done and creates:
            launcher = {"metadata": {}, "spec": {}, "status": {}}
        if self.suspended:
            setc("Suspended", "True", "MPIJobSuspended", "MPIJob suspended")
        elif any(c["type"] == "Suspended" for c in conds) and setc(
            "Suspended", "False", "MPIJobResumed", "MPIJob resumed"
        ):
            st["startTime"] = now
        rs = st.setdefault("replicaStatuses", {})
        running_launchers = 0
        if launcher is not None:
            pods = self.launcher_pods(launcher)
            running_launchers = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")
            ls: dict[str, Any] = {}
            if (launcher.get("status") or {}).get("failed"):
                ls["failed"] = launcher["status"]["failed"]
            if _cond_true(launcher, "Complete"):
                ls["succeeded"] = 1
                st.setdefault("completionTime", launcher["status"].get("completionTime"))
                setc("Succeeded", "True", "MPIJobSucceeded", f"MPIJob {nsn} successfully completed.")
            elif _cond_true(launcher, "Failed"):
                jc = _cond(launcher, "Failed") or {}
                reason = jc.get("reason") or "MPIJobFailed"
                message = jc.get("message") or f"MPIJob {nsn} has failed"
                if reason == "BackoffLimitExceeded":
                    failed = [p for p in pods if (p.get("status") or {}).get("phase") == "Failed"]
                    if failed:
                        last = max(failed, key=lambda p: p["metadata"].get("creationTimestamp", ""))
                        reason += "/" + (last.get("status") or {}).get("reason", "")
                        message += ": " + (last.get("status") or {}).get("message", "")
                st.setdefault("completionTime", now)
                setc("Failed", "True", reason, message[:1024])
            elif running_launchers:
                ls["active"] = running_launchers
            rs["Launcher"] = ls
        ws: dict[str, int] = {}
        running = evicted = 0
        for p in workers:
            phase = (p.get("status") or {}).get("phase")
            key = {"Failed": "failed", "Succeeded": "succeeded", "Running": "active"}.get(phase or "")
            if key:
                ws[key] = ws.get(key, 0) + 1
            running += phase == "Running"
            evicted += phase == "Failed" and (p.get("status") or {}).get("reason") == "Evicted"
        rs["Worker"] = ws
        if evicted:
            setc("Failed", "True", "MPIJobEvicted", f"{evicted}/{len(workers)} workers are evicted")
        if self.suspended:
            setc("Running", "False", "MPIJobSuspended", f"MPIJob {nsn} is suspended.")
        elif self.finished({"conditions": conds}):
            if not any(c["type"] == "Running" for c in conds):
                at = st.get("completionTime") or now
                conds.append(
                    {
                        "lastTransitionTime": at,
                        "lastUpdateTime": at,
                        "message": f"MPIJob {nsn} is finished but Running condition was never set.",
                        "reason": "MPIJobRunning",
                        "status": "False",
                        "type": "Running",
                    }
                )
        elif launcher is not None and running_launchers >= 1 and running == len(workers):
            setc("Running", "True", "MPIJobRunning", f"MPIJob {nsn} is running.")
        st["conditions"] = conds
        return st


def _env(**values: str) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in values.items()]


def _defaulted(spec: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(spec))
    out.setdefault("slotsPerWorker", 1)
    out.setdefault("sshAuthMountPath", "/root/.ssh")
    out.setdefault("mpiImplementation", "OpenMPI")
    out.setdefault("launcherCreationPolicy", "AtStartup")
    out.setdefault("runPolicy", {}).setdefault("cleanPodPolicy", "None")
    return out


def _controller_uid(obj: Mapping[str, Any]) -> str | None:
    for ref in obj.get("metadata", {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return ref.get("uid")
    return None


def _cond(obj: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c.get("type") == ctype:
            return c
    return None


def _cond_true(obj: Mapping[str, Any], ctype: str) -> bool:
    c = _cond(obj, ctype)
    return c is not None and c.get("status") == "True"


def _ready(pod: Mapping[str, Any] | None) -> bool:
    return pod is not None and _cond_true(pod, "Ready")


def _cleans(run_policy: Mapping[str, Any]) -> bool:
    return run_policy["cleanPodPolicy"] in ("All", "Running")


def _deleted_by_cleanup(run_policy: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    policy = run_policy["cleanPodPolicy"]
    phase = (pod.get("status") or {}).get("phase")
    return policy == "All" or (policy == "Running" and phase in ("Running", "Pending"))


def _set_condition(
    conds: list[dict[str, Any]], ctype: str, status: str, reason: str, message: str, now: str
) -> tuple[list[dict[str, Any]], bool]:
    current = next((c for c in conds if c["type"] == ctype), None)
    if current is not None and current["status"] == status and current["reason"] == reason:
        return conds, False
    new = {
        "lastTransitionTime": now,
        "lastUpdateTime": now,
        "message": message,
        "reason": reason,
        "status": status,
        "type": ctype,
    }
    if current is not None and current["status"] == status:
        new["lastTransitionTime"] = current["lastTransitionTime"]
    out = []
    for c in conds:
        if c["type"] == ctype or {ctype, c["type"]} == {"Running", "Restarting"}:
            continue
        if ctype in ("Failed", "Succeeded") and c["type"] in ("Running", "Failed"):
            c = {**c, "status": "False"}  # times kept
        out.append(c)
    return [*out, new], True
