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
    parsed = [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]
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


@pytest.mark.parametrize("image_input", [*IMAGE_INPUTS.values(), "requirements/build.in"])
def test_each_lock_pins_every_input_within_its_range_with_hashes(image_input: str) -> None:
    pinned = locked_versions(image_input.removesuffix(".in") + ".txt")
    for name, requirement in requirements_of(image_input).items():
        assert name in pinned, f"{image_input}: {name} is not locked"
        assert requirement.specifier.contains(pinned[name]), f"{name}=={pinned[name]} is outside {requirement}"


@pytest.mark.parametrize(("dockerfile", "image_input"), IMAGE_INPUTS.items())
def test_each_dockerfile_installs_its_lock_before_the_source_in_a_separate_stage(
    dockerfile: str, image_input: str
) -> None:
    text = (REPO / dockerfile).read_text()
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    assert len(stages) == 2, f"{dockerfile}: a wheel-building stage and the image"
    bases = {stage.split()[0] for stage in stages}
    assert len(bases) == 1, f"{dockerfile}: both stages on one base image"
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", bases.pop()), "a pinned patch release of 3.11-slim"
    image = stages[1]
    lock = image_input.removesuffix(".in") + ".txt"
    assert f"COPY {lock} " in image
    assert "--require-hashes" in image
    assert image.index(f"COPY {lock} ") < image.index("COPY --from=wheel"), "dependencies first, then the wheel"
    assert not re.search(r"^COPY (kubenexus|agent|placement) ", image, re.M), "the image gets the wheel, not the source"
