"""Writes testdata/tensorboard.golden: two TFRecord-framed tensorflow.Event
protos encoded by TensorBoard's own Python protos and record writer, which
TestTensorBoardMatchesTensorBoardsWriter compares byte for byte with
actors/ui's encoding of the same events.

    python3 -m venv /tmp/tb && /tmp/tb/bin/pip install tensorboard==2.21.0
    /tmp/tb/bin/python actors/ui/testdata/gen/tensorboard_golden.py actors/ui/testdata/tensorboard.golden
"""
import sys

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

with open(sys.argv[1], "wb") as f:
    w = RecordWriter(f)
    w.write(event_pb2.Event(wall_time=1700000000.5, file_version="brain.Event:2").SerializeToString())
    summary = summary_pb2.Summary(value=[
        summary_pb2.Summary.Value(tag="train/loss", simple_value=0.125),
        summary_pb2.Summary.Value(tag="held_out/pass1_hint_3", simple_value=0.3),
    ])
    w.write(event_pb2.Event(wall_time=1700000100.25, step=3, summary=summary).SerializeToString())
    w.flush()
