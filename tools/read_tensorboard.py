#!/usr/bin/env python3
"""Prints what TensorBoard itself reads from a log folder, for tests/train/tensorboard_test.cc.

Reads DIR with TensorBoard's EventAccumulator (which checks every record's masked CRC32C) and
prints, one per line, tab-separated:
    file_version  <the version string of the first event>
    <tag>         <step>  <value>      (every scalar; value as Python's repr: exact)
Exit status 0 on success, 2 on bad usage; a missing `tensorboard` package raises ImportError
(exit 1), which the test reports as a skip.
"""
import sys

from tensorboard.backend.event_processing import event_accumulator


def main(argv):
    if len(argv) != 2:
        print("usage: read_tensorboard.py DIR", file=sys.stderr)
        return 2
    acc = event_accumulator.EventAccumulator(argv[1], size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    print(f"file_version\t{acc.file_version}")
    for tag in sorted(acc.Tags()["scalars"]):
        for e in acc.Scalars(tag):
            print(f"{tag}\t{e.step}\t{e.value!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
