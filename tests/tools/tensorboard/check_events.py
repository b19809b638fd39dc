#!/usr/bin/python3
"""Reads the TensorBoard event file write_events wrote, as TensorBoard would, independently of
cppgrad: the TFRecord framing with every CRC checked (CRC-32C computed here, bit by bit), each
record parsed as an Event with Python's protobuf and the schema tools/event.proto (compiled here
with protoc, each field number checked against TensorFlow's published ones), and every value
compared with what write_events logged.

    check_events.py WRITE_EVENTS_BINARY WORK_DIR

Debian's python3-protobuf and protobuf-compiler are needed (scripts/setup installs them); without
them this fails, naming the missing package.
"""
import glob
import importlib
import math
import os
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA_DIR = os.path.join(HERE, "..", "..", "..", "tools")

# TensorFlow's field numbers (tensorflow/core/util/event.proto, framework/summary.proto), which
# TensorBoard reads by: the schema the writer is compiled from must give each field its number.
TENSORFLOW_FIELDS = {
    "Event": {"wall_time": 1, "step": 2, "file_version": 3, "graph_def": 4, "summary": 5},
    "Summary": {"value": 1},
    "Summary.Value": {"tag": 1, "simple_value": 2, "obsolete_old_style_histogram": 3, "image": 4, "histo": 5,
                      "audio": 6, "node_name": 7, "tensor": 8},
    "HistogramProto": {"min": 1, "max": 2, "num": 3, "sum": 4, "sum_squares": 5, "bucket_limit": 6, "bucket": 7},
}


def fail(message):
    print(f"check_events: FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    with open(path, "rb") as f:
        data = f.read()
    pos, out = 0, []
    while pos < len(data):
        if pos + 12 > len(data):
            fail(f"{path}: a record header cut short at byte {pos}")
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if masked(crc32c(header)) != length_crc:
            fail(f"{path}: record at byte {pos}: the length's CRC is wrong")
        body = data[pos + 12:pos + 12 + length]
        if len(body) != length or pos + 16 + length > len(data):
            fail(f"{path}: record at byte {pos} is cut short")
        (body_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        if masked(crc32c(body)) != body_crc:
            fail(f"{path}: record at byte {pos}: the data's CRC is wrong")
        out.append(body)
        pos += 16 + length
    return out


def main():
    if len(sys.argv) != 3:
        fail("usage: check_events.py WRITE_EVENTS_BINARY WORK_DIR")
    try:
        import google.protobuf  # noqa: F401
    except ImportError:
        fail(f"{sys.executable} has no protobuf module: install Debian's python3-protobuf (scripts/setup does)")
    protoc = shutil.which("protoc")
    if protoc is None:
        fail("protoc is missing: install Debian's protobuf-compiler (scripts/setup does)")

    writer, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    logdir = os.path.join(work, "log")
    subprocess.run([writer, logdir], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([protoc, f"--proto_path={SCHEMA_DIR}", f"--python_out={work}", os.path.join(SCHEMA_DIR, "event.proto")],
                   check=True)
    sys.path.insert(0, work)
    event_pb2 = importlib.import_module("event_pb2")
    for message, fields in TENSORFLOW_FIELDS.items():
        descriptor = event_pb2.DESCRIPTOR.message_types_by_name[message.split(".")[0]]
        if "." in message:
            descriptor = descriptor.nested_types_by_name[message.split(".")[1]]
        numbers = {f.name: f.number for f in descriptor.fields}
        if numbers != fields:
            fail(f"tools/event.proto's {message} has the fields {numbers}, TensorFlow's are {fields}")

    files = glob.glob(os.path.join(logdir, "events.out.tfevents.*"))
    if len(files) != 1:
        fail(f"expected one event file in {logdir}, found {files}")
    name = os.path.basename(files[0]).split(".")
    if len(name) < 5 or not name[3].isdigit():
        fail(f"the event file's name {files[0]} is not events.out.tfevents.<seconds>.<host>")

    events = []
    for body in records(files[0]):
        e = event_pb2.Event()
        e.ParseFromString(body)
        if e.SerializeToString() != body:  # every byte was a field of the schema, none left unread
            fail(f"a record does not re-encode to its own bytes: {body!r}")
        events.append(e)
    if not events or events[0].file_version != "brain.Event:2":
        fail("the first event does not name the file version brain.Event:2")
    scalars, histograms = {}, {}
    for e in events[1:]:
        if e.wall_time < 1.5e9:
            fail(f"an event's wall_time {e.wall_time} is not seconds since 1970")
        if len(e.summary.value) != 1:
            fail(f"an event holds {len(e.summary.value)} values, expected 1")
        v = e.summary.value[0]
        if v.WhichOneof("value") == "simple_value":
            scalars[(v.tag, e.step)] = v.simple_value
        elif v.WhichOneof("value") == "histo":
            histograms[(v.tag, e.step)] = v.histo
        else:
            fail(f"value {v.tag} at step {e.step} is neither a scalar nor a histogram")

    expected = {("train/loss", s): (math.nan if s == 7 else 1.0 / s) for s in range(1, 21)}
    expected.update({("eval/loss", s): 2.0 / s for s in (5, 10, 15, 20)})
    if set(scalars) != set(expected):
        fail(f"the scalars logged are {sorted(scalars)}, expected {sorted(expected)}")
    for key, want in expected.items():
        got = scalars[key]
        # simple_value is a float32: the double logged, rounded to float.
        if math.isnan(want):
            if not math.isnan(got):
                fail(f"{key}: {got}, expected NaN")
        elif got != struct.unpack("<f", struct.pack("<f", want))[0]:
            fail(f"{key}: {got}, expected {want} as a float32")

    h = histograms.get(("weights/w", 20))
    if h is None or len(histograms) != 1:
        fail(f"expected one histogram weights/w at step 20, found {sorted(histograms)}")
    values = [-1.0 + 0.25 * i for i in range(9)]  # the infinity is left out
    checks = [("min", h.min, -1.0), ("max", h.max, 1.0), ("num", h.num, 9.0), ("sum", h.sum, sum(values)),
              ("sum_squares", h.sum_squares, sum(v * v for v in values))]
    for what, got, want in checks:
        if abs(got - want) > 1e-12:
            fail(f"histogram {what}: {got}, expected {want}")
    # Five equal bins over [-1, 1]: limits -0.6, -0.2, 0.2, 0.6, 1.0; the values -1..-0.75 in the
    # first, -0.5 and -0.25 in the second, 0 in the third, 0.25 and 0.5 in the fourth, 0.75, 1 in the fifth.
    limits = [-0.6, -0.2, 0.2, 0.6, 1.0]
    if len(h.bucket_limit) != 5 or any(abs(a - b) > 1e-12 for a, b in zip(h.bucket_limit, limits)):
        fail(f"histogram bucket_limit {list(h.bucket_limit)}, expected {limits}")
    if list(h.bucket) != [2.0, 2.0, 1.0, 2.0, 2.0]:
        fail(f"histogram bucket {list(h.bucket)}, expected [2, 2, 1, 2, 2]")
    print(f"check_events: {len(events)} records, every CRC right; {len(scalars)} scalars and 1 histogram as logged")


if __name__ == "__main__":
    main()
