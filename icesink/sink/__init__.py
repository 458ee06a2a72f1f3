"""The driver side of the sink: table resolution, schema checks and the per-batch protocol."""
