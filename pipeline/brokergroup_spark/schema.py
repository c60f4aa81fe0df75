"""The row schema, declared once for Spark and once for Arrow.

Spark checks the first Arrow batch a reader yields against the Arrow form of the declared schema
(``to_arrow_schema(schema, timezone="UTC")``), types and nullability included; the decoder builds
its batches against :data:`ARROW_SCHEMA` and a unit test keeps the two in step.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
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
