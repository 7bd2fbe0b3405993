"""Inside every rank: its place in the collective sequence, and what is said about collectives.

``recorder`` keeps the last collective the rank entered (op, per-group sequence number, shapes, dtype,
group, the user's call site) in a fixed-size mmap'd record others read without signalling the rank;
``nextstop`` suspends the rank at its next collective (``recorder.stop_at_next``: "run every rank to its next
collective"); ``mismatch`` turns torch's ``--check-collectives`` mismatch paragraph into one line. They
import the shared layers (common, registry) only, and nothing of the rank's but each other.
"""
