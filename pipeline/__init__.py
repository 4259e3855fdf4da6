"""Spark data source and jobs over the public API and the storage codecs."""
