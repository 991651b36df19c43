#!/usr/bin/env python3
"""Independent reader of TensorBoard event files, for the test of mnist-train's writer.

    read_tfevents.py FILE   ->  one JSON line per event: {"step", "wall_time", "file_version"?, "scalars"}

Checks every record's framing (length, masked CRC-32C of the length, data, masked CRC-32C of the
data) with its own CRC-32C, and decodes each record with protobuf (python3-protobuf) from the
Event / Summary message definitions of tensorflow/core/util/event.proto and
tensorflow/core/framework/summary.proto (only the fields needed, same numbers and types), built
here as descriptors. Exits non-zero, naming the offset, on any damage.
"""
import json
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool

try:
    from google.protobuf import message_factory

    def message_class(descriptor):
        if hasattr(message_factory, "GetMessageClass"):
            return message_factory.GetMessageClass(descriptor)
        return message_factory.MessageFactory().GetPrototype(descriptor)
except ImportError:  # pragma: no cover
    sys.exit("read_tfevents.py: python3-protobuf is missing")


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def event_class():
    f = descriptor_pb2.FileDescriptorProto(name="mnist_test_event.proto", package="tensorboard_test")
    T = descriptor_pb2.FieldDescriptorProto
    value = f.message_type.add(name="Value")
    value.field.add(name="tag", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=T.TYPE_FLOAT, label=T.LABEL_OPTIONAL)
    summary = f.message_type.add(name="Summary")
    summary.field.add(name="value", number=1, type=T.TYPE_MESSAGE, label=T.LABEL_REPEATED,
                      type_name=".tensorboard_test.Value")
    event = f.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=T.TYPE_DOUBLE, label=T.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    event.field.add(name="summary", number=5, type=T.TYPE_MESSAGE, label=T.LABEL_OPTIONAL,
                    type_name=".tensorboard_test.Summary")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_class(pool.FindMessageTypeByName("tensorboard_test.Event"))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: read_tfevents.py FILE")
    Event = event_class()
    raw = open(sys.argv[1], "rb").read()
    offset = 0
    while offset < len(raw):
        if offset + 12 > len(raw):
            sys.exit(f"offset {offset}: truncated record header")
        header = raw[offset:offset + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", raw[offset + 8:offset + 12])
        if masked(crc32c(header)) != length_crc:
            sys.exit(f"offset {offset}: the length's CRC does not match")
        data = raw[offset + 12:offset + 12 + length]
        if len(data) != length or offset + 16 + length > len(raw):
            sys.exit(f"offset {offset}: truncated record data")
        (data_crc,) = struct.unpack("<I", raw[offset + 12 + length:offset + 16 + length])
        if masked(crc32c(data)) != data_crc:
            sys.exit(f"offset {offset}: the data's CRC does not match")
        event = Event()
        event.ParseFromString(data)
        out = {"step": event.step, "wall_time": event.wall_time,
               "scalars": {v.tag: v.simple_value for v in event.summary.value}}
        if event.file_version:
            out["file_version"] = event.file_version
        print(json.dumps(out))
        offset += 16 + length


if __name__ == "__main__":
    main()
