"""Every command the chart's NOTES show works as shown, on a fresh install and a new group.

The chart is installed in namespaced mode into a namespace of its own (so every command carries
that ``-n``), ``helm get notes`` gives the text a user reads, and each indented command in it is
run in order from the repository root with bash: rollout status, apply the example, wait for
Ready, get, describe, the habroker CLI pod that creates a topic, produces and consumes, the
restart annotation and the scale (afterwards: two slaves in sync, every broker restarted). Only the uninstall steps are left out: they delete the
cluster-wide CRDs the rest of the suite needs (the fixture uninstalls the release itself).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.tests.kube import Kube
from e2e.userpath import Cluster, eventually, find_tool, in_sync

pytestmark = pytest.mark.timeout(900)
ROOT = Path(__file__).resolve().parents[2]
#: the NOTES' example group uses this image; a suite run with another one cannot follow them
NOTES_IMAGE = "brokergroup/habroker:dev"
DESTRUCTIVE = ("helm uninstall", "kubectl delete crd")


def notes_commands(notes: str) -> list[str]:
    """The shell commands in the NOTES: lines indented by two spaces that start with kubectl
    or helm, with their continuation lines (a trailing backslash or an open quote)."""
    commands: list[str] = []
    lines = notes.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("  ") and line.split()[0] in ("kubectl", "helm"):
            command = line.strip()
            while command.endswith("\\") or not _closed(command):
                i += 1
                command = command + "\n" + lines[i]
            commands.append(command)
        i += 1
    return commands


def _closed(command: str) -> bool:
    try:
        shlex.split(command)
    except ValueError:
        return False
    return True


def test_notes_parser_joins_continuations() -> None:
    text = "intro:\n  kubectl get bg\n  kubectl run x -- \\\n    sh -c 'a &&\n      b'\nend\n"
    assert notes_commands(text) == [
        "kubectl get bg",
        "kubectl run x -- \\\n    sh -c 'a &&\n      b'",
    ]


@pytest.fixture
def release(kube: Kube, broker_image: str, operator_image: str) -> Iterator[tuple[Cluster, str]]:
    if broker_image != NOTES_IMAGE:
        pytest.skip(f"the NOTES' example runs {NOTES_IMAGE}, this suite {broker_image}")
    helm = find_tool("helm", "HELM")
    if helm is None:
        pytest.fail("no helm binary: `make cluster-build` builds one into e2e/.cluster/bin")
    c = Cluster(kube.env["KUBECONFIG"], kube.kubectl, helm)
    ns = f"e2e-notes-{os.urandom(3).hex()}"
    c.kubectl("create", "namespace", ns)
    try:
        c.install_operator("bgnotes", ns, operator_image, "--set", "watch.mode=namespaced")
        yield c, ns
    finally:
        if os.environ.get("E2E_KEEP_NAMESPACES") != "1":
            c.kubectl("-n", ns, "delete", "bg", "--all", "--timeout=120s", check=False)
            c.helm("uninstall", "bgnotes", "--namespace", ns, "--wait", check=False)
            c.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_every_notes_command_works_on_a_fresh_group(release: tuple[Cluster, str]) -> None:
    c, ns = release
    notes = c.helm("get", "notes", "bgnotes", "--namespace", ns)
    commands = notes_commands(notes)
    runnable = [cmd for cmd in commands if not cmd.startswith(DESTRUCTIVE)]
    assert any("topic create" in cmd for cmd in runnable), notes
    assert all(f"-n {ns}" in cmd for cmd in runnable), runnable
    tools = {Path(c.kubectl_bin).parent, Path(c.helm_bin or "helm").parent}
    env = {
        **c.env,
        "PATH": os.pathsep.join([*map(str, tools), os.environ.get("PATH", "")]),
    }
    for cmd in runnable:
        c.check()
        res = subprocess.run(
            ["bash", "-c", cmd],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=360,
        )
        assert res.returncode == 0, f"{cmd}\n-> {res.returncode}\n{res.stdout}\n{res.stderr}"
        print(f"$ {cmd}\n{res.stdout[-600:]}{res.stderr[-600:]}")
        if "habroker consume" in cmd:
            assert "consumed 1000 message(s)" in res.stdout + res.stderr
    # the last two did what they say: two slaves, in sync, every broker restarted with the value
    eventually(
        lambda: (
            c.status(ns, "payments").get("slaveReplicas") == 2
            and in_sync(c.status(ns, "payments"), 2)
        ),
        480,
        "two slaves in sync after the scale and the restart",
    )
    pods = c.json("-n", ns, "get", "pods", "-l", "brokergroup.io/group=payments")["items"]
    assert len(pods) == 3
    eventually(
        lambda: all(
            "brokergroup.io/restart" in p["metadata"].get("annotations", {})
            for p in c.json("-n", ns, "get", "pods", "-l", "brokergroup.io/group=payments")["items"]
        ),
        480,
        "every broker restarted",
    )
