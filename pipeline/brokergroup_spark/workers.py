"""Spark's Python workers: which interpreter they run, and a clear error when it lacks the package.

Spark runs the connector's code in Python worker processes it starts itself — planner workers
beside the driver, task workers in every executor — with the interpreter the SparkContext names
(``PYSPARK_PYTHON``, default ``python3`` from ``PATH``), not the one the driver script runs in.
:func:`choose_worker_python` points them at the driver's interpreter when that is certainly
right (the executors run on this machine), and honours ``spark.pyspark.python``, which a
SparkSession built in plain Python otherwise ignores.

:class:`GuardedDataSource` is what ``register()`` registers. This module is pickled *by value*
(``register_pickle_by_value``), so a worker unpickles these classes without importing the
package; everything of the package itself (the real data source, readers, partitions, writers)
travels inside them as pickled bytes and is loaded on first use through :func:`load`, which turns
"No module named 'brokergroup_spark'" into an error that says how to give the workers the package.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import socket
import sys
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit

from pyspark import cloudpickle
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

SOURCE = ("brokergroup_spark.source", "BrokerGroupDataSource")
DEFAULT_PYTHON = "python3"  # SparkContext.pythonExec when PYSPARK_PYTHON is unset


class WorkerPythonError(RuntimeError):
    """A Spark Python worker's interpreter cannot import the connector."""


def fix_message(error: ImportError) -> str:
    """What a worker that cannot import the connector reports, with the fixes."""
    host = socket.gethostname()
    return (
        f"the Spark Python worker on {host} ({sys.executable}) cannot import the brokergroup "
        f"connector: {error}. Spark starts its Python workers with PYSPARK_PYTHON "
        f"(default {DEFAULT_PYTHON!r} from PATH), not with the driver's interpreter. Fix: run "
        "the workers with a Python that has the package installed — PYSPARK_PYTHON="
        "/path/to/python (or the session conf spark.pyspark.python, or spark-submit "
        "--conf spark.pyspark.python=...) — or ship it to the executors: spark-submit "
        "--py-files brokergroup.zip (brokergroup_spark and habroker), or an executor image "
        "with the package installed. See docs/spark.md, 'Where the Python workers run'."
    )


def load(blob: bytes) -> Any:
    """Unpickle the package's own objects, explaining a missing package (or a dependency of
    it: every import this does is the connector's)."""
    try:
        return cloudpickle.loads(blob)
    except ImportError as error:
        raise WorkerPythonError(fix_message(error)) from error


def _source_class() -> Any:
    module, name = SOURCE
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as error:
        raise WorkerPythonError(fix_message(error)) from error


def _dumps(value: Any) -> bytes:
    blob: bytes = cloudpickle.dumps(value)  # type: ignore[no-untyped-call]
    return blob


class _Carried:
    """Holds one of the package's objects as pickled bytes until a worker uses it."""

    def __init__(self, inner: Any) -> None:
        self._blob: bytes | None = None
        self._inner: Any = inner

    def __getstate__(self) -> dict[str, Any]:
        # pickled as it is now, like Spark pickles a reader or writer it ships
        blob = self._blob if self._inner is None else _dumps(self._inner)
        return {"_blob": blob}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._blob = state["_blob"]
        self._inner = None

    @property
    def inner(self) -> Any:
        if self._inner is None and self._blob is not None:
            self._inner = load(self._blob)
        return self._inner


class CarriedPartition(InputPartition, _Carried):
    def __init__(self, inner: InputPartition) -> None:
        InputPartition.__init__(self, None)
        _Carried.__init__(self, inner)

    def __repr__(self) -> str:
        return f"CarriedPartition({self.inner!r})"


def _carry(partitions: Sequence[InputPartition]) -> list[InputPartition]:
    return [CarriedPartition(p) for p in partitions]


def _unwrap(partition: InputPartition) -> Any:
    return getattr(partition, "inner", partition)


class GuardedReader(DataSourceReader, _Carried):
    def partitions(self) -> Sequence[InputPartition]:
        return _carry(self.inner.partitions())

    def read(self, partition: InputPartition) -> Iterator[Any]:
        result: Iterator[Any] = self.inner.read(_unwrap(partition))
        return result


class GuardedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow, _Carried):
    def initialOffset(self) -> dict[str, Any]:
        result: dict[str, Any] = self.inner.initialOffset()
        return result

    def getDefaultReadLimit(self) -> ReadLimit:
        result: ReadLimit = self.inner.getDefaultReadLimit()
        return result

    def prepareForTriggerAvailableNow(self) -> None:
        self.inner.prepareForTriggerAvailableNow()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        result: dict[str, Any] = self.inner.latestOffset(start, limit)
        return result

    def reportLatestOffset(self) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self.inner.reportLatestOffset()
        return result

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return _carry(self.inner.partitions(start, end))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        result: Iterator[Any] = self.inner.read(_unwrap(partition))
        return result

    def commit(self, end: dict[str, Any]) -> None:
        self.inner.commit(end)

    def stop(self) -> None:
        self.inner.stop()


class GuardedWriter(DataSourceArrowWriter, _Carried):
    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        result: WriterCommitMessage = self.inner.write(iterator)
        return result

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self.inner.commit(messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self.inner.abort(messages)


class GuardedStreamWriter(DataSourceStreamArrowWriter, _Carried):
    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        result: WriterCommitMessage = self.inner.write(iterator)
        return result

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.inner.commit(messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.inner.abort(messages, batchId)


class GuardedDataSource(DataSource):
    """``format("brokergroup")`` as registered: the real source, loaded where it runs."""

    @classmethod
    def name(cls) -> str:
        return "brokergroup"

    def _source(self) -> Any:
        return _source_class()(self.options)

    def schema(self) -> StructType:
        result: StructType = self._source().schema()
        return result

    def reader(self, schema: StructType) -> DataSourceReader:
        return GuardedReader(self._source().reader(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return GuardedStreamReader(self._source().streamReader(schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return GuardedWriter(self._source().writer(schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return GuardedStreamWriter(self._source().streamWriter(schema, overwrite))


cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]

# Masters whose executors run on this machine, so the driver's interpreter exists there too.
_SAME_MACHINE_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]"}


def _local_names() -> set[str]:
    names = set(_SAME_MACHINE_HOSTS)
    with contextlib.suppress(OSError):
        names |= {socket.gethostname(), socket.getfqdn()}
    if os.environ.get("SPARK_LOCAL_IP"):
        names.add(os.environ["SPARK_LOCAL_IP"])
    return names


def runs_on_this_machine(master: str) -> bool:
    """True for ``local[…]``/``local-cluster[…]`` and ``spark://`` masters on this machine.

    A standalone master on this machine may still have workers elsewhere; the driver's
    interpreter path is then only right if those machines have it too (same image or layout),
    which is the usual set-up for a standalone cluster on one host or identical hosts.
    """
    if master == "local" or master.startswith(("local[", "local-cluster[")):
        return True
    if not master.startswith("spark://"):
        return False  # k8s://, yarn, mesos: executors run elsewhere, in their own image
    hosts = [urlsplit("spark://" + part).hostname or "" for part in master[8:].split(",")]
    names = _local_names()
    return all(h in names or h.startswith("127.") for h in hosts)


def choose_worker_python(spark: Any) -> str | None:
    """Set the session's Python worker interpreter, as the connector needs it; returns it.

    ``PYSPARK_PYTHON`` set: unchanged. Else ``spark.pyspark.python`` set: that (a SparkSession
    built in plain Python reads only the environment variable). Else, for a master whose
    executors run on this machine: the driver's own interpreter, ``sys.executable``, which can
    import the package since the driver just did. Else (Kubernetes, YARN, a remote standalone
    cluster): unchanged — the executors' image decides, and a worker without the package fails
    with :class:`WorkerPythonError` naming the fix. A Spark Connect session has no
    SparkContext here (the server starts its workers): None, nothing changed.
    """
    try:
        sc = spark.sparkContext
    except Exception:  # pyspark.errors: SparkContext is not supported in Spark Connect
        return None
    if os.environ.get("PYSPARK_PYTHON"):
        return str(sc.pythonExec)
    conf = sc.getConf().get("spark.pyspark.python")
    if conf:
        sc.pythonExec = conf
    elif sc.pythonExec == DEFAULT_PYTHON and runs_on_this_machine(sc.master):
        sc.pythonExec = sys.executable
    return str(sc.pythonExec)
