"""The command lines as a user meets them: help on every flag with its default, ``--version`` everywhere,
shell completion through argcomplete, the ``import-topo`` table, and ``simulate`` without its trace.

The parsers walked here are the programs' own (``build_parser``), not copies; completion runs argcomplete
itself on them, with only its output stream and its exit replaced so that it answers into the test.
"""

from __future__ import annotations

import argparse
import io
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import NoReturn

import argcomplete
import argcomplete.io
import pytest
from argcomplete.finders import CompletionFinder

import agent.kubectl_plugin
import agent.main
import placement.main
import placement.sim.cli
from kubenexus import __version__
from placement.sim.policies import POLICY_NAMES
from tests.conftest import GPU_DIR, require_shared

GH200_CAPTURE = Path(__file__).parent / "machines" / "captures" / "gh200_2gpu_nvidia-smi_topo_m.txt"

# (program name, the real parser builder, the real entry point)
PROGRAMS: tuple[tuple[str, Callable[[], argparse.ArgumentParser], Callable[[list[str]], int]], ...] = (
    ("kubenexus-placement", placement.main.build_parser, placement.main.main),
    ("kubenexus-agent", agent.main.build_parser, agent.main.main),
    ("kubectl-kubenexus", agent.kubectl_plugin.build_parser, agent.kubectl_plugin.main),
    ("python -m placement.sim", placement.sim.cli.build_parser, placement.sim.cli.main),
)
PROGRAM_IDS = [name for name, _, _ in PROGRAMS]


def walk(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """The parser and every subcommand's parser under it, named by their command path."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, subparser in action.choices.items():
                yield from walk(subparser, f"{path} {name}")


def is_defaulted_option(action: argparse.Action) -> bool:
    """An option whose default means something to a user: not a plain on/off switch that starts off."""
    if not action.option_strings or action.default in (None, argparse.SUPPRESS):
        return False
    return not (action.nargs == 0 and action.default is False)


@pytest.mark.parametrize(("name", "build", "entry"), PROGRAMS, ids=PROGRAM_IDS)
def test_no_help_shows_raw_markup(
    name: str, build: Callable[[], argparse.ArgumentParser], entry: Callable[[list[str]], int]
) -> None:
    """A terminal shows --help as it is: reStructuredText's ``literal`` marks, copied from a docstring, are noise."""
    raw = [path for path, parser in walk(build(), name) if "``" in parser.format_help()]
    assert raw == []


@pytest.mark.parametrize(("name", "build", "entry"), PROGRAMS, ids=PROGRAM_IDS)
def test_every_flag_has_help_and_every_default_is_shown(
    name: str, build: Callable[[], argparse.ArgumentParser], entry: Callable[[list[str]], int]
) -> None:
    missing_help: list[str] = []
    default_not_shown: list[str] = []
    checked = 0
    for path, parser in walk(build(), name):
        formatter = parser._get_formatter()
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._VersionAction):
                continue
            if isinstance(action, argparse._SubParsersAction):
                missing_help += [f"{path} {sub.dest}" for sub in action._choices_actions if not sub.help]
                continue
            where = f"{path} {'/'.join(action.option_strings) or action.dest}"
            checked += 1
            if not action.help or action.help == argparse.SUPPRESS:
                missing_help.append(where)
            elif is_defaulted_option(action) and "default" not in formatter._expand_help(action):
                default_not_shown.append(where)
    assert checked >= 5  # the plugin's five: NODE, --source, --format, --kubeconfig, --context
    assert missing_help == []
    assert default_not_shown == []


def test_the_walk_reaches_every_subcommand() -> None:
    placement_paths = [path for path, _ in walk(placement.main.build_parser(), "p")]
    agent_paths = [path for path, _ in walk(agent.main.build_parser(), "a")]
    assert placement_paths == ["p", "p serve", "p extender", "p binder", "p simulate"]
    assert agent_paths == ["a", "a discover", "a import-topo", "a run"]


def test_policies_help_lists_every_policy_name() -> None:
    simulate = dict(walk(placement.main.build_parser(), "p"))["p simulate"]
    policies = next(action for action in simulate._actions if "--policies" in action.option_strings)
    text = simulate._get_formatter()._expand_help(policies)
    assert all(policy in text for policy in POLICY_NAMES), text


def test_lease_defaults_are_shown_as_each_command_sets_them() -> None:
    """``serve`` turns leader election off by default and the binder keeps it on: the help says which."""
    commands = dict(walk(placement.main.build_parser(), "p"))
    shown = {}
    for command in ("p serve", "p binder"):
        parser = commands[command]
        action = next(action for action in parser._actions if "--leader-elect" in action.option_strings)
        shown[command] = parser._get_formatter()._expand_help(action)
    assert shown["p serve"].endswith("(default: False)")
    assert shown["p binder"].endswith("(default: True)")


@pytest.mark.parametrize(("name", "build", "entry"), PROGRAMS, ids=PROGRAM_IDS)
def test_version_works_on_every_program(
    name: str,
    build: Callable[[], argparse.ArgumentParser],
    entry: Callable[[list[str]], int],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("_ARGCOMPLETE", raising=False)
    with pytest.raises(SystemExit) as exited:
        entry(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"{name} {__version__}\n"


class _Answered(Exception):
    """argcomplete's exit, turned into an exception so that the entry point stops where a shell's would."""


def _stop(code: int) -> NoReturn:
    raise _Answered(code)


class _QuietFinder(CompletionFinder):
    # argcomplete writes its debug lines to file descriptor 9 when one is open; under pytest that may be
    # any file, so they go nowhere (the hook argcomplete's docstring offers for this).
    def _init_debug_stream(self) -> None:
        argcomplete.io.debug_stream = io.StringIO()


def complete(entry: Callable[[list[str]], int], line: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the shell would offer for ``line`` (cursor at its end), asking the real entry point."""
    answer = io.StringIO()
    finder = partial(_QuietFinder(), exit_method=_stop, output_stream=answer)
    monkeypatch.setattr(argcomplete, "autocomplete", finder)
    monkeypatch.setenv("_ARGCOMPLETE", "1")
    monkeypatch.setenv("COMP_LINE", line)
    monkeypatch.setenv("COMP_POINT", str(len(line)))
    monkeypatch.delenv("_ARGCOMPLETE_SHELL", raising=False)
    monkeypatch.delenv("_ARGCOMPLETE_DFS", raising=False)
    with pytest.raises(_Answered):
        entry([])
    # A single match comes back with the space the shell would type after it.
    return sorted(word.rstrip(" ") for word in answer.getvalue().split("\013"))


def test_completion_offers_the_subcommands(monkeypatch: pytest.MonkeyPatch) -> None:
    assert complete(placement.main.main, "kubenexus-placement ", monkeypatch) == [
        "--help",
        "--version",
        "-h",
        "binder",
        "extender",
        "serve",
        "simulate",
    ]
    assert complete(agent.main.main, "kubenexus-agent ", monkeypatch) == [
        "--debug",
        "--help",
        "--version",
        "-h",
        "discover",
        "import-topo",
        "run",
    ]


def test_completion_offers_flags_and_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    assert complete(placement.main.main, "kubenexus-placement serve --lis", monkeypatch) == ["--listen"]
    assert complete(agent.main.main, "kubenexus-agent discover --format ", monkeypatch) == ["json", "table", "topo"]
    assert complete(agent.kubectl_plugin.main, "kubectl-kubenexus --source ", monkeypatch) == [
        "annotation",
        "auto",
        "nrt",
    ]
    assert complete(placement.main.main, "kubenexus-placement simulate --policies nrt-", monkeypatch) == [
        "nrt-LeastNUMANodes",
        "nrt-MostAllocated",
    ]
    assert complete(placement.sim.cli.main, "python -m placement.sim --no-", monkeypatch) == [
        "--no-numa",
        "--no-plots",
    ]


def test_import_topo_table_shows_each_gpu_its_numa_placement_and_links(capsys: pytest.CaptureFixture[str]) -> None:
    capture = require_shared(GPU_DIR / "pcie_8gpu_nvlink_bridge_pairs_NV12__k8s-device-plugin-issue546.txt")
    assert agent.main.main(["import-topo", str(capture), "--format", "table"]) == 0
    out = capsys.readouterr().out
    # nvidia-smi topo -m gives no model or memory: said so, not left out.
    assert "  GPU0  model unknown, memory unknown; NUMA 0, CPUs 0-31; NVLink NV12 to GPU 2\n" in out
    assert "  GPU5  model unknown, memory unknown; NUMA 1, CPUs 32-63; NVLink NV12 to GPU 4\n" in out
    assert "\nLinks\n\tGPU0\tGPU1\tGPU2" in out
    assert "GPU0\t X \tSYS\tNV12\t" in out


def test_import_topo_table_shows_nic_affinity_and_gpu_memory_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    assert agent.main.main(["import-topo", str(GH200_CAPTURE), "--format", "table"]) == 0
    out = capsys.readouterr().out
    assert (
        "  GPU0  model unknown, memory unknown; NUMA 0, CPUs 0-71, GPU memory is NUMA 2; NVLink NV18 to GPU 1; "
        "nearest NIC mlx5_0 (NODE)\n"
    ) in out
    assert "NIC Legend:" in out


def test_simulate_without_its_trace_names_the_flags_and_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As after `pip install .`: no ../shared/data beside the package, KUBENEXUS_SHARED_DATA unset or wrong."""
    monkeypatch.setenv("KUBENEXUS_SHARED_DATA", str(tmp_path / "nowhere"))
    monkeypatch.delenv("_ARGCOMPLETE", raising=False)
    assert placement.main.main(["simulate", "--seeds", "1", "--out", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith(f"simulate: no trace file at {tmp_path / 'nowhere'}/traces/alibaba-gpu-v2023/")
    assert "KUBENEXUS_SHARED_DATA" in line
    assert "--nodes and --pods" in line
    assert "try --sample" in line
    assert not (tmp_path / "out").exists()


def test_simulate_runs_on_its_sample_where_the_trace_is_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`simulate --sample`: a made-up trace in the trace's format, written into --out and run, said so."""
    monkeypatch.setenv("KUBENEXUS_SHARED_DATA", str(tmp_path / "nowhere"))
    monkeypatch.delenv("_ARGCOMPLETE", raising=False)
    out = tmp_path / "out"
    argv = ["simulate", "--sample", "--seeds", "1", "--policies", "default,ours", "--no-plots", "--out", str(out)]
    assert placement.main.main(argv) == 0
    captured = capsys.readouterr()
    assert "a made-up sample trace, not the trace" in captured.err
    assert [line.split(" |")[0] for line in captured.out.splitlines()[2:]] == ["| default", "| ours"]
    assert {"sample-nodes.csv", "sample-pods.csv", "summary.csv"} <= {path.name for path in out.iterdir()}


def test_simulate_help_mentions_the_shared_data_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    simulate = dict(walk(placement.main.build_parser(), "p"))["p simulate"]
    assert "KUBENEXUS_SHARED_DATA" in simulate.format_help()
