"""PySpark data source ``brokergroup``: read and write a broker group's topics from Spark."""
