"""The images' requirements agree with pyproject.toml, their locks pin them, and the Dockerfiles use the locks.

What the images really import is checked by ``python -m tools.check_images`` (fresh virtualenvs, network):
too slow for the test suite, so CI runs it as a step of its own. These are the fast, static halves.
"""

from __future__ import annotations

import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name

from tests import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())

# Runtime dependencies that neither image installs, and why.
IN_NO_IMAGE = {canonicalize_name("psutil"): "imported only by benchmarks/"}

IMAGE_INPUTS = {"Dockerfile.agent": "requirements/agent.in", "Dockerfile.placement": "requirements/placement.in"}


def requirements_of(path: str) -> dict[NormalizedName, Requirement]:
    lines = (REPO / path).read_text().splitlines()
    # Options (``-c placement.txt``: a constraint file) are the lock tool's, not requirements.
    parsed = [Requirement(line) for line in lines if line.strip() and not line.startswith(("#", "-"))]
    return {canonicalize_name(requirement.name): requirement for requirement in parsed}


def locked_versions(path: str) -> dict[NormalizedName, str]:
    """name -> pinned version of a lock; fails on a pin without a hash."""
    text = (REPO / path).read_text()
    pins = re.findall(
        r"^([A-Za-z0-9._-]+)==([^ ;\\\n]+)[^\n]*\\\n((?:\s+--hash=sha256:[0-9a-f]{64}[^\n]*\n)*)", text, re.M
    )
    every_pin = re.findall(r"^[A-Za-z0-9._-]+==", text, re.M)
    assert len(pins) == len(every_pin), f"{path}: a pin without --hash lines"
    assert all(hashes for _, _, hashes in pins), f"{path}: a pin without --hash lines"
    return {canonicalize_name(name): version for name, version, _ in pins}


def test_each_image_input_copies_its_requirements_from_pyproject() -> None:
    # The compiled extra may be added to the placement image (docs/deploy.md, the compiled admission kernel).
    items = [*PYPROJECT["project"]["dependencies"], *PYPROJECT["project"]["optional-dependencies"]["compiled"]]
    declared = {canonicalize_name(Requirement(item).name): Requirement(item) for item in items}
    for image_input in IMAGE_INPUTS.values():
        for name, requirement in requirements_of(image_input).items():
            assert name in declared, f"{image_input}: {name} is not in pyproject.toml's dependencies"
            assert requirement.specifier == declared[name].specifier, (
                f"{image_input}: {requirement} differs from pyproject.toml's {declared[name]}"
            )


def test_every_runtime_dependency_is_in_an_image_or_excused() -> None:
    declared = {canonicalize_name(Requirement(item).name) for item in PYPROJECT["project"]["dependencies"]}
    in_images = set().union(*(requirements_of(image_input).keys() for image_input in IMAGE_INPUTS.values()))
    assert declared - in_images == set(IN_NO_IMAGE)


def test_the_agent_image_leaves_out_what_only_the_service_imports() -> None:
    agent = requirements_of("requirements/agent.in").keys()
    assert not {"numpy", "cel-python", "grpcio-health-checking", "grpcio-reflection"} & set(agent)
    assert "nvidia-ml-py" not in requirements_of("requirements/placement.in")


def test_the_build_input_is_the_declared_build_requirement() -> None:
    (declared,) = [Requirement(item) for item in PYPROJECT["build-system"]["requires"]]
    (locked_input,) = requirements_of("requirements/build.in").values()
    assert (locked_input.name, locked_input.specifier) == (declared.name, declared.specifier)


@pytest.mark.parametrize("image_input", [*IMAGE_INPUTS.values(), "requirements/build.in", "requirements/kernel.in"])
def test_each_lock_pins_every_input_within_its_range_with_hashes(image_input: str) -> None:
    pinned = locked_versions(image_input.removesuffix(".in") + ".txt")
    for name, requirement in requirements_of(image_input).items():
        assert name in pinned, f"{image_input}: {name} is not locked"
        assert requirement.specifier.contains(pinned[name]), f"{name}=={pinned[name]} is outside {requirement}"


@pytest.mark.parametrize(("dockerfile", "image_input"), IMAGE_INPUTS.items())
def test_each_dockerfile_installs_its_lock_before_the_source_in_a_separate_stage(
    dockerfile: str, image_input: str
) -> None:
    stages = _stages(dockerfile)
    # The placement image builds its admission kernel in a stage between (test below).
    assert len(stages) == (3 if dockerfile == "Dockerfile.placement" else 2), f"{dockerfile}: its stages"
    wheel, image = stages[0], stages[-1]
    assert wheel.split()[0] == image.split()[0], f"{dockerfile}: the wheel and the image on one base image"
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", image.split()[0]), "a pinned patch release of 3.11-slim"
    lock = image_input.removesuffix(".in") + ".txt"
    assert f"COPY {lock} " in image
    assert "--require-hashes" in image
    assert image.index(f"COPY {lock} ") < image.index("COPY --from=wheel"), "dependencies first, then the wheel"
    assert not re.search(r"^COPY (kubenexus|agent|placement) ", image, re.M), "the image gets the wheel, not the source"


def _stages(dockerfile: str) -> list[str]:
    return re.split(r"^FROM ", (REPO / dockerfile).read_text(), flags=re.M)[1:]


def test_the_placement_image_builds_its_kernel_in_a_stage_of_its_own_and_keeps_only_the_module() -> None:
    """The kernel stage: the final image's Python release on Debian's full image (a C compiler), the service's
    lock and the kernel's (numba) with hashes, the wheel, then the build; the image copies the module and its
    digest beside the installed package, and never installs numba."""
    _, kernel, image = _stages("Dockerfile.placement")
    base = image.split()[0]
    assert kernel.split()[:3] == [base.replace("-slim-bookworm", "-bookworm"), "AS", "kernel"]
    installs = re.findall(r"-r (/tmp/\S+\.txt)", kernel)
    assert installs == ["/tmp/placement.txt", "/tmp/kernel.txt"]
    assert kernel.count("--require-hashes") == 2
    assert (
        kernel.index("-r /tmp/kernel.txt")
        < kernel.index("COPY --from=wheel")
        < kernel.index("python -m placement.core.kernel.ahead_of_time --output-dir /kernel")
    )
    python = re.fullmatch(r"python:(3\.\d+)\.\d+-slim-bookworm", base)
    assert python is not None
    assert f"COPY --from=kernel /kernel/ /usr/local/lib/python{python[1]}/site-packages/placement/core/kernel/" in image
    assert "kernel.txt" not in image


def test_the_kernel_lock_is_numba_of_the_compiled_extra_over_the_services_numpy() -> None:
    (compiled,) = [Requirement(item) for item in PYPROJECT["project"]["optional-dependencies"]["compiled"]]
    (numba,) = requirements_of("requirements/kernel.in").values()
    assert (numba.name, numba.specifier) == (compiled.name, compiled.specifier)
    assert "-c placement.txt" in (REPO / "requirements" / "kernel.in").read_text().splitlines()
    kernel, service = locked_versions("requirements/kernel.txt"), locked_versions("requirements/placement.txt")
    assert numba.specifier.contains(kernel[canonicalize_name("numba")])
    assert kernel[canonicalize_name("numpy")] == service[canonicalize_name("numpy")]
