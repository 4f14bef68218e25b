"""Dockerfile.scheduler builds kubenexus-scheduler as tools/kubenexus_scheduler.py builds it for the tests (no
Docker engine runs here): the same package, Go version, environment, -trimpath and version ldflags, and the
image runs it as non-root with the shipped configuration's path. hadolint lints it (python -m tools.check_images).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess

import pytest

from tests import REPO
from tools.control_plane import version_ldflags
from tools.kubenexus_scheduler import PROGRAMS

DOCKERFILE = REPO / "Dockerfile.scheduler"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0], line.split(None, 1)[1]) for line in lines]


def build_command() -> list[str]:
    (command,) = [args for kind, args in instructions() if kind == "RUN" and args.startswith("go build")]
    return shlex.split(command)


def test_the_image_builds_the_package_the_tests_build_with_the_same_flags() -> None:
    command = build_command()
    assert shlex.split(command[command.index("-ldflags") + 1]) == shlex.split(version_ldflags())
    assert "-trimpath" in command
    assert command[-1] == PROGRAMS.packages[0] == "./cmd/kubenexus-scheduler"
    (environment,) = [args for kind, args in instructions() if kind == "ENV"]
    assert dict(pair.split("=", 1) for pair in shlex.split(environment)) == {
        "CGO_ENABLED": "0",  # a static binary for the distroless base
        "GOFLAGS": "-mod=readonly -buildvcs=false",  # tools.control_plane.run_go's
    }


def test_the_image_uses_the_go_version_the_modules_are_built_with() -> None:
    go = shutil.which("go")
    if go is None:
        pytest.skip("no Go toolchain here to compare with")
    version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()
    build_stage = next(args for kind, args in instructions() if kind == "FROM")
    assert build_stage == f"golang:{version.removeprefix('go')}-bookworm AS build"


def test_the_image_runs_as_non_root_with_the_shipped_configuration() -> None:
    final = [args for kind, args in instructions() if kind == "FROM"][-1]
    assert final == "gcr.io/distroless/static-debian12:nonroot"
    assert ("USER", "65532:65532") in instructions()
    (command,) = [args for kind, args in instructions() if kind == "CMD"]
    shipped = REPO / "deploy" / "scheduler" / "kubenexus-scheduler-config.yaml"
    assert command == f'["--config=/etc/kubenexus/{shipped.name}"]'
