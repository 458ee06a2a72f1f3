"""When is the data done: a stream's event-time watermark, kept with the data.

A stream that declares ``event_time`` gets a watermark: per split of its input (a Kafka topic and partition,
or the columns named by ``split_by``), the largest event time seen minus the allowed lateness; the stream's
watermark is the smallest of these over the splits that are not idle, and it never moves backwards. Write
tasks observe the event times as they write (:mod:`icesink.writer.event_times`); the driver folds what they
saw into the stream's state (:mod:`.watermark`) and stages it with the checkpoint; the committer records it in
the snapshot summary (``icesink.watermark``) and the split state in a table property, in the same commit as
the data, so that the watermark is recovered from the table like the checkpoint marker.
"""
