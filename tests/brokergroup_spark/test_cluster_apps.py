"""Applications of their own on the standalone cluster, as users start them: a plain
``python script.py`` with no Spark variables set, executors whose Python lacks the package, and
``spark-submit`` of the example job with the package shipped by ``--py-files``.

Each runs in a subprocess (a process has one SparkContext, and these need their own settings);
the cluster is the session's ``spark_cluster`` (tests/brokergroup_spark/cluster.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from brokergroup_spark.workers import runs_on_this_machine

from tests.brokergroup_spark.cluster import QUICK_JVM, SPARK_SUBMIT
from tests.brokergroup_spark.conftest import produce

REPO = Path(__file__).resolve().parents[2]

APP = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    from brokergroup_spark import register

    master, namesrv, topic = sys.argv[1:4]
    for worker_python in sys.argv[4:]:  # one application after the other
        builder = (
            SparkSession.builder.master(master)
            .config("spark.driver.extraJavaOptions", "{jvm}")
            .config("spark.executor.extraJavaOptions", "{jvm}")
            .config("spark.executor.memory", "768m")
            .config("spark.cores.max", "2")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.task.maxFailures", "1")
        )
        if worker_python != "-":
            builder = builder.config("spark.pyspark.python", worker_python)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("OFF")
        print("WORKER PYTHON", register(spark), flush=True)
        reader = spark.read.format("brokergroup").option("namesrvAddr", namesrv)
        try:
            print("COUNT", reader.option("topic", topic).load().count(), flush=True)
        except Exception as error:
            print("FAILED", error, flush=True)
        spark.stop()
    """
).format(jvm=QUICK_JVM)


def user_env() -> dict[str, str]:
    """Our environment as a user's shell has it: no PYSPARK_* set, and the venv's bin not on
    PATH (so ``python3`` is not this interpreter)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv_bin)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def python_without_the_package(path: Path, *, only_on_executors: bool) -> Path:
    """An interpreter as an executor image without the connector would have: this venv's Python
    with its third-party packages (pyspark, pyarrow, …) but neither brokergroup_spark nor
    habroker (``-S``: no .pth files, so no editable install; PYTHONPATH: site-packages only).
    ``only_on_executors``: the driver side (planner workers) keeps the package, as when the
    driver machine has it and the executors do not; Spark's Worker sets SPARK_EXECUTOR_DIRS
    for the executors it launches."""
    site = sysconfig.get_paths()["purelib"]
    hide = f'PYTHONPATH="{site}" exec "{sys.executable}" -S "$@"'
    lines = ["#!/bin/sh"]
    if only_on_executors:
        lines += ['if [ -n "$SPARK_EXECUTOR_DIRS" ]; then', f"  {hide}", "fi"]
        lines += [f'exec "{sys.executable}" "$@"']
    else:
        lines += [hide]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
    return path


def test_worker_python_defaults_to_the_drivers_and_a_missing_package_is_explained(
    spark_cluster, group, tmp_path
):
    produce(group, "apps", queues=2, per_queue=100)
    script = tmp_path / "app.py"
    script.write_text(APP)
    hidden = python_without_the_package(tmp_path / "python-no-bg", only_on_executors=True)
    # `python app.py` as a user runs it, two applications in turn: first with nothing set,
    # then with spark.pyspark.python naming a Python whose executors lack the package
    args = [sys.executable, str(script), spark_cluster.url, group.namesrv_addr, "apps"]
    done = subprocess.run(
        [*args, "-", str(hidden)],
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    first, _, second = done.stdout.partition(f"WORKER PYTHON {hidden}")
    output = done.stdout + done.stderr[-5000:]

    # 1. no PYSPARK_PYTHON: register() gave the workers this interpreter, and the read works
    assert f"WORKER PYTHON {sys.executable}" in first, output
    assert "COUNT 200" in first, output

    # 2. spark.pyspark.python honoured (plain PySpark reads only the environment variable);
    # the executors' Python cannot import the package: the task fails in an executor's Python
    # worker with the fix spelled out, not a bare "No module named"
    assert second, output
    assert "FAILED" in second and "COUNT" not in second, output
    assert "executor" in second, output  # lost task … (127.0.0.1 executor N)
    assert "cannot import the brokergroup connector" in second, output
    assert "No module named 'brokergroup_spark'" in second, output
    for fix in ("PYSPARK_PYTHON=", "spark.pyspark.python", "--py-files"):
        assert fix in second, (fix, output)


def package_zip(path: Path) -> Path:
    """brokergroup_spark and habroker as one zip, for --py-files."""
    with zipfile.ZipFile(path, "w") as archive:
        for root in (REPO / "pipeline", REPO / "broker_image"):
            package = root / ("brokergroup_spark" if root.name == "pipeline" else "habroker")
            for file in package.rglob("*"):
                if file.is_file() and "__pycache__" not in file.parts:
                    archive.write(file, file.relative_to(root))
    return path


def test_spark_submit_of_the_example_job_to_the_standalone_cluster(spark_cluster, group, tmp_path):
    # As docs/spark.md says to submit it: the executors' Python has no connector of its own,
    # so the package travels with --py-files; the job reads the group through the executors.
    produce(group, "submitted", queues=4, per_queue=250)
    hidden = python_without_the_package(tmp_path / "python-no-bg", only_on_executors=True)
    out, ckpt = tmp_path / "parquet", tmp_path / "checkpoint"
    args = [
        str(SPARK_SUBMIT),
        "--master",
        spark_cluster.url,
        "--conf",
        f"spark.pyspark.python={hidden}",
        "--conf",
        f"spark.pyspark.driver.python={sys.executable}",
        "--conf",
        f"spark.driver.extraJavaOptions={QUICK_JVM}",
        "--conf",
        f"spark.executor.extraJavaOptions={QUICK_JVM}",
        "--conf",
        "spark.executor.memory=768m",
        "--conf",
        "spark.cores.max=2",
        "--py-files",
        str(package_zip(tmp_path / "brokergroup.zip")),
        str(REPO / "pipeline" / "jobs" / "topic_to_parquet.py"),
        "--namesrv-addr",
        group.namesrv_addr,
        "--topic",
        "submitted",
        "--output",
        str(out),
        "--checkpoint",
        str(ckpt),
    ]
    done = subprocess.run(args, env=user_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert f"wrote 1000 messages to {out}" in done.stdout, done.stdout
    table = pq.read_table(out).to_pydict()
    keys = list(zip(table["queueId"], table["queueOffset"], strict=True))
    assert len(keys) == len(set(keys)) == 1000
    assert set(keys) == {(q, i) for q in range(4) for i in range(250)}
    bodies = zip(table["body"], table["queueId"], strict=True)
    assert all(body.startswith(f"submitted/{q}/".encode()) for body, q in bodies)


@pytest.mark.parametrize(
    ("master", "same_machine"),
    [
        ("local[2]", True),
        ("local", True),
        ("local-cluster[2,1,1024]", True),
        ("spark://127.0.0.1:7077", True),
        ("spark://localhost:7077,127.0.0.2:7077", True),
        ("spark://spark-master.example:7077", False),
        ("k8s://https://10.0.0.1:6443", False),
        ("yarn", False),
    ],
)
def test_which_masters_get_the_drivers_python(master, same_machine):
    assert runs_on_this_machine(master) is same_machine
