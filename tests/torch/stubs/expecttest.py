"""The part of `expecttest` that torch's test utilities import.

Debian's python3-torch ships torch.testing._internal (and PyTorch's
distributed test suite in it) but not its `expecttest` dependency, which
only contributes a TestCase base class with expect-style assertions that
the distributed suite does not use.
"""
import unittest

# Whether expect-style assertions rewrite their expectations (never here).
ACCEPT = False


class TestCase(unittest.TestCase):
    longMessage = True
