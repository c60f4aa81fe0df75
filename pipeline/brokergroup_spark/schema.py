"""The row schema, declared once for Spark and once for Arrow.

Spark checks the first Arrow batch a reader yields against the Arrow form of the declared schema
(``to_arrow_schema(schema, timezone="UTC")``), types and nullability included; the decoder builds
its batches against :data:`ARROW_SCHEMA` and a unit test keeps the two in step.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

COLUMNS = (
    "key",
    "body",
    "topic",
    "queueId",
    "queueOffset",
    "commitLogOffset",
    "bornTimestamp",
    "storeTimestamp",
    "tags",
    "properties",
    "brokerId",
)

SPARK_SCHEMA = StructType(
    [
        StructField("key", StringType()),
        StructField("body", BinaryType()),
        StructField("topic", StringType()),
        StructField("queueId", IntegerType()),
        StructField("queueOffset", LongType()),
        StructField("commitLogOffset", LongType()),
        StructField("bornTimestamp", TimestampType()),
        StructField("storeTimestamp", TimestampType()),
        StructField("tags", StringType()),
        StructField("properties", MapType(StringType(), StringType())),
        StructField("brokerId", IntegerType()),
    ]
)

TIMESTAMP = pa.timestamp("us", tz="UTC")
PROPERTIES = pa.map_(pa.string(), pa.string())

ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.string()),
        pa.field("body", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("queueId", pa.int32()),
        pa.field("queueOffset", pa.int64()),
        pa.field("commitLogOffset", pa.int64()),
        pa.field("bornTimestamp", TIMESTAMP),
        pa.field("storeTimestamp", TIMESTAMP),
        pa.field("tags", pa.string()),
        pa.field("properties", PROPERTIES),
        pa.field("brokerId", pa.int32()),
    ]
)

# includeHeaders: the message properties again, as Kafka's ``headers`` column (array of
# key/value structs, values as bytes: UTF-8 of the property value), appended last.
HEADERS_FIELD = StructField(
    "headers",
    ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
)
SPARK_SCHEMA_WITH_HEADERS = StructType([*SPARK_SCHEMA.fields, HEADERS_FIELD])
HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS = pa.list_(pa.field("element", HEADER))
ARROW_SCHEMA_WITH_HEADERS = ARROW_SCHEMA.append(pa.field("headers", HEADERS))


def spark_schema(include_headers: bool) -> StructType:
    return SPARK_SCHEMA_WITH_HEADERS if include_headers else SPARK_SCHEMA


def with_headers(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with a ``headers`` column built from its ``properties`` (zero-copy: the
    map's offsets and children become the list's)."""
    props = batch.column("properties")
    assert isinstance(props, pa.MapArray)
    pairs = pa.StructArray.from_arrays(
        [props.keys, props.items.cast(pa.binary())], fields=list(HEADER)
    )
    headers = pa.ListArray.from_arrays(props.offsets, pairs, type=HEADERS)
    return pa.RecordBatch.from_arrays([*batch.columns, headers], schema=ARROW_SCHEMA_WITH_HEADERS)
