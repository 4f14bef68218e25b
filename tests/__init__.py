"""The suite: test folders mirror the code (tests/agent, tests/kubenexus, tests/placement/<layer>, tests/deploy),
plus tests/cluster (the real control plane), tests/upstream (the oracles), tests/benchmarks and tests/tools; helpers
and authored fixtures stay at this level."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent  # this folder: the helpers' and the authored fixtures' home
REPO = TESTS.parent
