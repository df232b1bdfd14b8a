"""The real node's images, built from Debian packages (and PyPI's mpich and impi-rt) without a registry:
the pi program for each MPI implementation, and LAMMPS with mpi4py as a real application.

One debootstrap (minbase) tree is the shared base layer; each MPI image adds one layer, made by running
its recipe in a chroot of an overlayfs over the base (the upper dir is the layer). Everything is cached
under <cache>/<key>, the key hashing every input (recipes, scripts, sources, pinned versions), so a warm
call only checks stamps. Needs root (debootstrap, mounts, chroot).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path

import attrs

from localcluster.binaries import REPO_ROOT
from localcluster.images import oci

IMAGES_DIR = REPO_ROOT / "deploy" / "local" / "images"
SUITE = "bookworm"
BASE_PACKAGES = ("openssh-server", "openssh-client")
# pi.c is compiled once per MPI ABI ("flavour"); the MPICH build also serves Intel MPI's image.
COMPILER_PACKAGES = ("gcc", "libc6-dev")
PI_FLAVOURS: dict[str, tuple[str, ...]] = {
    "openmpi": ("libopenmpi-dev", "openmpi-bin"),
    "mpich": ("libmpich-dev", "mpich"),
}
IMPI_REQUIREMENT = "impi-rt==2021.18.1"  # the last release that bundles libfabric in its wheel
IMPI_PREFIX = "/opt/intel/mpi"
# Not Debian 12's MPICH 4.0.2: built for UCX only, its MPI_Finalize can deadlock over TCP (one rank spins
# in ucp_worker_progress closing endpoints while its peer already waits in the PMI barrier). PyPI's MPICH 5
# uses libfabric's tcp provider.
MPICH_REQUIREMENT = "mpich==5.0.2"
MPICH_PREFIX = "/opt/mpich"
PAUSE_IMAGE = "localhost/pause:local"
# The name deploy/kustomization.yaml gives the operator's image, so `kubectl apply -k deploy/` runs it as is.
OPERATOR_IMAGE = "docker.io/library/mpijob-operator:0.1.0"


def wheel_packages() -> tuple[str, ...]:
    """The packages pyproject.toml puts in the operator wheel."""
    with (REPO_ROOT / "pyproject.toml").open("rb") as f:
        return tuple(tomllib.load(f)["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"])


OPERATOR_SOURCES = ("pyproject.toml", *wheel_packages())  # what the wheel is built from (README: text only)
# Part of every cache key: bump it when a change to this module changes what an image contains (the
# module's own text is not hashed, so unrelated edits do not rebuild every image).
RECIPE_REV = 1
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def cache_root() -> Path:
    # An empty XDG_CACHE_HOME means the default, as for build.sh (${XDG_CACHE_HOME:-...}).
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mpijob-operator" / "images"
    return Path(os.environ.get("MPIJOB_IMAGES_CACHE", default))


def log(msg: str) -> None:
    print(f"images: {msg}", file=sys.stderr, flush=True)


@attrs.frozen
class Recipe:
    """One MPI image: Debian packages and a shell script run in the chroot, plus the image config."""

    name: str  # the image reference pods use
    packages: tuple[str, ...] = ()
    pi: str = ""  # which build of pi.c goes to /home/mpiuser/pi: "openmpi" | "mpich" | "" (none)
    script: str = ""
    env: tuple[str, ...] = (f"PATH={SYSTEM_PATH}",)
    entrypoint: tuple[str, ...] = ()
    wheel: str = ""  # a PyPI requirement whose wheel's data dir is unpacked as an install prefix
    prefix: str = ""  # where that wheel goes


_ENTRYPOINT = (
    "install -m 0755 /tmp/build/entrypoint.sh /entrypoint.sh\n"
    # getent answers from cluster DNS; no dnsutils needed.
)


def _prefix_env(prefix: str, *extra: str) -> tuple[str, ...]:
    return (f"PATH={prefix}/bin:{SYSTEM_PATH}", f"LD_LIBRARY_PATH={prefix}/lib", *extra)


def _prefix_script(prefix: str, env: tuple[str, ...]) -> str:
    return (
        # pi is built against Debian's MPICH: give the wheel's libmpi (same ABI) MPICH's soname.
        f"ln -s libmpi.so.12 {prefix}/lib/libmpich.so.12\n"
        # ssh sessions (hydra's proxies on the workers) get the same PATH and libraries as the image.
        "env_line='SetEnv " + " ".join(env) + "'\n"
        'echo "$env_line" >>/etc/ssh/sshd_config\n'
        'echo "$env_line" >>/home/mpiuser/.sshd_config\n'
    )


_INTEL_ENV = _prefix_env(IMPI_PREFIX, f"I_MPI_ROOT={IMPI_PREFIX}")
_MPICH_ENV = _prefix_env(MPICH_PREFIX, "MPIR_CVAR_CH4_NETMOD=ofi")  # the wheel also has UCX


def _wheel_recipe(name: str, requirement: str, prefix: str, env: tuple[str, ...]) -> Recipe:
    """MPICH and Intel MPI: a PyPI wheel as the install prefix, pi built against MPICH's ABI, and
    upstream's entrypoint that waits for the hostfile's names."""
    return Recipe(
        name=name,
        pi="mpich",
        script=_ENTRYPOINT + _prefix_script(prefix, env),
        env=env,
        entrypoint=("/entrypoint.sh",),
        wheel=requirement,
        prefix=prefix,
    )


RECIPES: dict[str, Recipe] = {
    "openmpi": Recipe(name="localhost/mpi-pi:openmpi", packages=("openmpi-bin",), pi="openmpi"),
    "mpich": _wheel_recipe("localhost/mpi-pi:mpich", MPICH_REQUIREMENT, MPICH_PREFIX, _MPICH_ENV),
    # libgomp etc. are not needed; Intel's runtime only wants what the base has.
    "intel": _wheel_recipe("localhost/mpi-pi:intel", IMPI_REQUIREMENT, IMPI_PREFIX, _INTEL_ENV),
}
# MPI applications nobody here wrote, from Debian on its Open MPI (the tests compare their output with
# what their authors publish): LAMMPS (`lmp`) and mpi4py with its bundled benchmarks.
RECIPES["lammps"] = Recipe(name="localhost/lammps:openmpi", packages=("lammps", "python3-mpi4py"))
# The images `localcluster images` lists: root and non-root Open MPI share one image, as upstream's.
IMPLEMENTATIONS = {"openmpi": "openmpi", "openmpi-nonroot": "openmpi", "mpich": "mpich", "intel": "intel"}
APPLICATIONS = {"lammps": "lammps"}


def image_names() -> dict[str, str]:
    """Image key (an MPI implementation or an application) -> the image reference pods use."""
    return {key: RECIPES[recipe].name for key, recipe in {**IMPLEMENTATIONS, **APPLICATIONS}.items()}


# -- cache keys ------------------------------------------------------------------------------------
def _inputs_hash(*parts: object) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(repr(part).encode())
        h.update(b"\0")
    h.update(f"rev {RECIPE_REV}".encode())
    for path in [*sorted(IMAGES_DIR.iterdir()), Path(oci.__file__)]:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def mirror() -> str:
    """The Debian mirror apt already uses on this machine (MPIJOB_DEBIAN_MIRROR overrides)."""
    if env := os.environ.get("MPIJOB_DEBIAN_MIRROR"):
        return env
    sources = [Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")]
    for path in sources:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            words = line.split()
            if words[:1] == ["URIs:"] and len(words) > 1 and "security" not in words[1]:
                return words[1]
            if words[:1] == ["deb"] and len(words) > 2 and "security" not in words[-2]:
                url = next(w for w in words[1:] if "://" in w)
                return url
    raise RuntimeError("no Debian mirror found in apt's sources; set MPIJOB_DEBIAN_MIRROR")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One builder per cache entry on the machine; a second caller waits, then finds the stamp."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


@contextlib.contextmanager
def _cache_entry(root: Path, name: str, key: str) -> Iterator[tuple[Path, bool]]:
    """The entry ``root/<name>-<key>``, held under its lock, and whether it is still to build (no
    ``.complete`` stamp yet)."""
    out = root / f"{name}-{key}"
    with _locked(root / f"{name}-{key}.lock"):
        yield out, not (out / ".complete").exists()


def _publish(stage: Path, out: Path) -> None:
    """A finished stage stamped and moved to ``out`` in one rename: readers see all of it or nothing."""
    (stage / ".complete").touch()
    stage.rename(out)


def _image_archive(stage: Path, name: str, base_layer: oci.Layer, config: oci.ImageConfig) -> None:
    """``stage/image.tar`` and its digest: the chroot's changes (``stage/upper``) as one layer over
    ``base_layer``. The build trees go."""
    layer = oci.write_layer(stage / "upper", stage / "layer.tar", overlay_upper=True)
    digest = oci.write_archive(name, [base_layer, layer], config, stage / "image.tar")
    (stage / "digest").write_text(digest)
    layer.path.unlink()
    shutil.rmtree(stage / "upper")
    shutil.rmtree(stage / "input")


def _run(argv: list[str], **kw: object) -> None:
    subprocess.run(argv, check=True, **kw)  # type: ignore[call-overload]


def _run_quiet(argv: list[str], out: Path) -> None:
    """Run with its output in a file (debootstrap's progress: hundreds of lines); a failure raises with
    the error and warning lines and the file's path."""
    with out.open("w") as f:
        code = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, check=False).returncode
    if code:
        lines = out.read_text(errors="replace").splitlines()
        said = [line for line in lines if line.startswith(("E:", "W:"))] or lines[-5:]
        raise RuntimeError(f"{argv[0]} failed with exit {code}: {' | '.join(said[-5:])} (all of it: {out})")


def _existing_link(link: str) -> bool:
    if link.startswith("file://"):
        return Path(link.removeprefix("file://")).exists()
    return "://" in link or Path(link).exists()


def host_pip_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for the host's pip: PIP_FIND_LINKS without the locations that do not exist, for
    each of which pip would warn on every call (as scripts/setup does)."""
    env = dict(os.environ if environ is None else environ)
    links = [link for link in env.pop("PIP_FIND_LINKS", "").split() if _existing_link(link)]
    if links:
        env["PIP_FIND_LINKS"] = " ".join(links)
    return env


# -- chroot builds over an overlay of the base ------------------------------------------------------
_OVERLAY_SH = r"""
set -eu
mount -t overlay overlay -o "lowerdir=$LOWER,upperdir=$UPPER,workdir=$WORKDIR" "$MERGED"
mount -t proc proc "$MERGED/proc"
mount -t tmpfs -o mode=755 tmpfs "$MERGED/dev"
for d in null zero full random urandom tty; do
  touch "$MERGED/dev/$d"
  mount --bind "/dev/$d" "$MERGED/dev/$d"
done
mkdir "$MERGED/dev/pts"
mount -t devpts -o newinstance,ptmxmode=0666 devpts "$MERGED/dev/pts"
ln -s pts/ptmx "$MERGED/dev/ptmx"
mount -t tmpfs tmpfs "$MERGED/tmp"
mkdir -p "$MERGED/tmp/build"
mount --bind "$INPUT" "$MERGED/tmp/build"
cp /etc/resolv.conf "$MERGED/etc/resolv.conf"
chroot "$MERGED" /bin/sh -eu /tmp/build/recipe.sh
rm -f "$MERGED/etc/resolv.conf"
"""


def _chroot_build(lower: Path, upper: Path, input_dir: Path, script: str) -> None:
    """Run script in a chroot of lower+upper (overlayfs) in a private mount namespace, so every mount
    goes away with the namespace, also if we are killed. input_dir is visible at /tmp/build."""
    (input_dir / "recipe.sh").write_text(script)
    with tempfile.TemporaryDirectory(dir=upper.parent, prefix=".overlay-") as tmp:
        merged, work = Path(tmp) / "merged", Path(tmp) / "work"
        merged.mkdir()
        work.mkdir()
        # The host's pip settings (PIP_FIND_LINKS, ...) name host paths; inside the chroot they only
        # make pip warn. The recipes pass pip what it needs.
        host_env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        env = dict(
            host_env,
            LOWER=str(lower),
            UPPER=str(upper),
            WORKDIR=str(work),
            MERGED=str(merged),
            INPUT=str(input_dir),
            DEBIAN_FRONTEND="noninteractive",
            DEBCONF_NOWARNINGS="yes",  # no "delaying package configuration, since apt-utils ..."
            LC_ALL="C",
        )
        _run(["unshare", "--mount", "--propagation", "private", "sh", "-c", _OVERLAY_SH], env=env)


def _apt_script(packages: tuple[str, ...]) -> str:
    if not packages:
        return ""
    return (
        "apt-get update -qq\n"
        f"apt-get install -y -qq --no-install-recommends {' '.join(packages)} >/dev/null\n"
        "apt-get clean\n"
        "rm -rf /var/lib/apt/lists/* /var/log/apt/* /var/log/dpkg.log\n"
    )


# -- the pieces ------------------------------------------------------------------------------------
def build_base(root: Path) -> tuple[Path, oci.Layer]:
    """debootstrap --variant=minbase + base.sh; returns (rootfs, its layer)."""
    with _cache_entry(root, "base", _inputs_hash("base", SUITE, BASE_PACKAGES)) as (out, to_build):
        if to_build:
            began = time.monotonic()
            log(f"Debian {SUITE} base (debootstrap minbase + ssh; ~5 min cold, ~100 MB of packages)")
            shutil.rmtree(out, ignore_errors=True)
            stage = Path(tempfile.mkdtemp(dir=root, prefix=".base-"))
            rootfs = stage / "rootfs"
            _run_quiet(
                [
                    "debootstrap",
                    "--variant=minbase",
                    f"--include={','.join(BASE_PACKAGES)}",
                    SUITE,
                    str(rootfs),
                    mirror(),
                ],
                stage / "debootstrap.out",
            )
            shutil.copy(IMAGES_DIR / "base.sh", rootfs / "base.sh")
            chroot_env = {"PATH": SYSTEM_PATH, "LC_ALL": "C"}
            _run(["chroot", str(rootfs), "/bin/sh", "-eu", "/base.sh"], env=chroot_env)
            (rootfs / "base.sh").unlink()
            oci.write_layer(rootfs, stage / "layer.tar")
            _publish(stage, out)
            log(f"base built in {time.monotonic() - began:.0f}s")
    return out / "rootfs", _layer(out / "layer.tar")


def _layer(path: Path) -> oci.Layer:
    digest_file = path.with_suffix(".digest")
    if not digest_file.exists():
        digest, _ = oci._sha256(path)
        digest_file.write_text(digest)
    return oci.Layer(path=path, digest=digest_file.read_text().strip(), size=path.stat().st_size)


def _pi_packages(flavours: tuple[str, ...]) -> tuple[str, ...]:
    return COMPILER_PACKAGES + tuple(p for f in flavours for p in PI_FLAVOURS[f])


def _pi_key(flavours: tuple[str, ...]) -> str:
    return _inputs_hash("pi", SUITE, _pi_packages(flavours))


def build_pi(root: Path, base: Path, flavours: Collection[str] = tuple(PI_FLAVOURS)) -> Path:
    """pi.c compiled with Debian's Open MPI and/or MPICH in a throw-away builder chroot. A build of
    every flavour serves any subset, so a machine that built them all builds nothing more."""
    wanted = tuple(f for f in PI_FLAVOURS if f in flavours)
    every = tuple(PI_FLAVOURS)
    if wanted != every and (root / f"pi-{_pi_key(every)}" / ".complete").exists():
        return root / f"pi-{_pi_key(every)}"
    with _cache_entry(root, "pi", _pi_key(wanted)) as (out, to_build):
        if to_build:
            began = time.monotonic()
            names = " and ".join({"openmpi": "Open MPI", "mpich": "MPICH"}[f] for f in wanted)
            log(f"pi program (builder chroot with gcc and {names}; ~2 min cold)")
            stage = Path(tempfile.mkdtemp(dir=root, prefix=".pi-"))
            upper, inp = stage / "upper", stage / "input"
            upper.mkdir()
            inp.mkdir()
            shutil.copy(IMAGES_DIR / "pi.c", inp / "pi.c")
            compile_lines = "".join(f"mpicc.{f} -O2 -o /tmp/build/pi-{f} /tmp/build/pi.c\n" for f in wanted)
            _chroot_build(base, upper, inp, _apt_script(_pi_packages(wanted)) + compile_lines)
            out.mkdir(exist_ok=True)
            for f in wanted:
                shutil.copy(inp / f"pi-{f}", out / f"pi-{f}")
            shutil.rmtree(stage)
            (out / ".complete").touch()
            log(f"pi built in {time.monotonic() - began:.0f}s")
    return out


def _wheel_tree(requirement: str, dest: Path) -> None:
    """A PyPI wheel (impi-rt, mpich), unpacked as an install prefix (its data dir); identical files
    hard-linked."""
    with tempfile.TemporaryDirectory() as tmp:
        _run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, requirement],
            stdout=subprocess.DEVNULL,
            env=host_pip_env(),
        )
        (wheel,) = Path(tmp).glob("*.whl")
        seen: dict[str, Path] = {}
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                parts = info.filename.split("/")
                if len(parts) < 4 or not parts[0].endswith(".data") or parts[1] != "data" or info.is_dir():
                    continue
                target = dest.joinpath(*parts[2:])
                target.parent.mkdir(parents=True, exist_ok=True)
                data = zf.read(info)
                digest = hashlib.sha256(data).hexdigest()
                if digest in seen:
                    os.link(seen[digest], target)
                    continue
                target.write_bytes(data)
                mode = (info.external_attr >> 16) & 0o777
                target.chmod(mode or 0o644)
                seen[digest] = target


def build_image(root: Path, impl: str, base: Path, base_layer: oci.Layer, pi_dir: Path | None) -> Path:
    recipe = RECIPES[impl]
    with _cache_entry(root, impl, _inputs_hash("image", SUITE, recipe)) as (out, to_build):
        if to_build:
            began = time.monotonic()
            what = f"PyPI {recipe.wheel}" if recipe.wheel else f"Debian {', '.join(recipe.packages)}"
            log(f"image {recipe.name} ({what}; ~1-2 min cold)")
            stage = Path(tempfile.mkdtemp(dir=root, prefix=f".{impl}-"))
            upper, inp = stage / "upper", stage / "input"
            upper.mkdir()
            inp.mkdir()
            shutil.copy(IMAGES_DIR / "entrypoint.sh", inp / "entrypoint.sh")
            script = _apt_script(recipe.packages)
            if recipe.wheel:
                _wheel_tree(recipe.wheel, inp / "prefix")
                script += f"mkdir -p {recipe.prefix}\ncp -a /tmp/build/prefix/. {recipe.prefix}/\n"
            if recipe.pi:
                assert pi_dir is not None, f"{impl} needs the pi build"
                shutil.copy(pi_dir / f"pi-{recipe.pi}", inp / "pi")
                script += "install -m 0755 -o mpiuser -g mpiuser /tmp/build/pi /home/mpiuser/pi\n"
            script += recipe.script
            _chroot_build(base, upper, inp, script)
            config = oci.ImageConfig(
                env=recipe.env, entrypoint=recipe.entrypoint, working_dir="/home/mpiuser"
            )
            _image_archive(stage, recipe.name, base_layer, config)
            _publish(stage, out)
            log(f"{recipe.name} built in {time.monotonic() - began:.0f}s")
    return out / "image.tar"


def build_pause(root: Path) -> Path:
    """A scratch image holding only a static pause binary: the pods' sandbox image."""
    with _cache_entry(root, "pause", _inputs_hash("pause")) as (out, to_build):
        if to_build:
            stage = Path(tempfile.mkdtemp(dir=root, prefix=".pause-"))
            tree = stage / "tree"
            tree.mkdir()
            _run(["gcc", "-static", "-Os", "-s", "-o", str(tree / "pause"), str(IMAGES_DIR / "pause.c")])
            layer = oci.write_layer(tree, stage / "layer.tar")
            config = oci.ImageConfig(env=(), entrypoint=("/pause",))
            digest = oci.write_archive(PAUSE_IMAGE, [layer], config, stage / "image.tar")
            (stage / "digest").write_text(digest)
            layer.path.unlink()
            shutil.rmtree(tree)
            shutil.rmtree(out, ignore_errors=True)
            _publish(stage, out)
    return out / "image.tar"


def _sources_hash() -> str:
    h = hashlib.sha256()
    for name in OPERATOR_SOURCES:
        top = REPO_ROOT / name
        for path in sorted([top] if top.is_file() else top.rglob("*.py")):
            h.update(str(path.relative_to(REPO_ROOT)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def build_operator(root: Path, base: Path, base_layer: oci.Layer) -> Path:
    """The operator as deploy/Dockerfile describes it, from the same Debian base (no registry): Debian's
    Python 3.11, a venv with the project's wheel and its PyPI dependencies, uid 65532."""
    with _cache_entry(root, "operator", _inputs_hash("operator", SUITE, _sources_hash())) as (out, to_build):
        if to_build:
            began = time.monotonic()
            log(f"image {OPERATOR_IMAGE} (Debian python3, the project's wheel and its PyPI dependencies)")
            stage = Path(tempfile.mkdtemp(dir=root, prefix=".operator-"))
            upper, inp = stage / "upper", stage / "input"
            upper.mkdir()
            inp.mkdir()
            # Everything is fetched on the host with its pip (PyPI as configured here); the chroot installs
            # offline from those wheels.
            pip = [sys.executable, "-m", "pip"]
            _run(
                [*pip, "wheel", "-q", "--no-deps", "-w", str(inp), str(REPO_ROOT)],
                stdout=subprocess.DEVNULL,
                env=host_pip_env(),
            )
            (wheel,) = inp.glob("*.whl")
            _run(
                [
                    *pip,
                    "download",
                    "-q",
                    "--only-binary=:all:",
                    "--python-version",
                    "3.11",
                    "-d",
                    str(inp),
                    str(wheel),
                ],
                stdout=subprocess.DEVNULL,
                env=host_pip_env(),
            )
            script = _apt_script(("python3", "python3-venv")) + (
                "python3 -m venv /opt/mpijob-operator\n"
                "/opt/mpijob-operator/bin/pip install -q --no-index --find-links /tmp/build"
                f" /tmp/build/{wheel.name}\n"
                # -K: 65532 (distroless' nonroot) is above login.defs' range, which only makes them warn.
                "groupadd -K GID_MAX=65534 --gid 65532 mpi-operator\n"
                "useradd -K UID_MAX=65534 --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent"
                " --shell /usr/sbin/nologin mpi-operator\n"
                "find /opt/mpijob-operator -name __pycache__ -prune -exec rm -rf {} +\n"
            )
            _chroot_build(base, upper, inp, script)
            config = oci.ImageConfig(
                env=(f"PATH=/opt/mpijob-operator/bin:{SYSTEM_PATH}", "PYTHONUNBUFFERED=1"),
                entrypoint=("/opt/mpijob-operator/bin/mpijob-operator",),
                user="65532:65532",
                working_dir="/",
            )
            _image_archive(stage, OPERATOR_IMAGE, base_layer, config)
            _publish(stage, out)
            log(f"{OPERATOR_IMAGE} built in {time.monotonic() - began:.0f}s")
    return out / "image.tar"


def archive_digest(archive: Path) -> str:
    """The manifest digest of a built archive (what containerd lists for the imported image)."""
    return (archive.parent / "digest").read_text().strip()


def all_images() -> tuple[str, ...]:
    """Every image build_images makes besides the pause image."""
    return (*(r.name for r in RECIPES.values()), OPERATOR_IMAGE)


def build_images(names: Iterable[str] | None = None, root: Path | None = None) -> dict[str, Path]:
    """Build (or find in the cache) the pause image and the named images (None: every image); returns
    image name -> archive. Only what the named images need is built (the base, pi for their MPI ABIs)."""
    wanted = set(all_images() if names is None else names) - {PAUSE_IMAGE}
    if unknown := wanted - set(all_images()):
        raise ValueError(f"no recipe builds {', '.join(sorted(unknown))} (known: {', '.join(all_images())})")
    root = root or cache_root()
    root.mkdir(parents=True, exist_ok=True)
    archives = {PAUSE_IMAGE: build_pause(root)}
    if not wanted:
        return archives
    base, base_layer = build_base(root)
    recipes = {impl: r for impl, r in RECIPES.items() if r.name in wanted}
    if recipes:
        flavours = {r.pi for r in recipes.values() if r.pi}
        pi_dir = build_pi(root, base, flavours) if flavours else None
        for impl, recipe in recipes.items():
            archives[recipe.name] = build_image(root, impl, base, base_layer, pi_dir)
    if OPERATOR_IMAGE in wanted:
        archives[OPERATOR_IMAGE] = build_operator(root, base, base_layer)
    return archives


def build_all(root: Path | None = None) -> dict[str, Path]:
    """Build (or find in the cache) every image; returns image name -> archive."""
    return build_images(None, root)
