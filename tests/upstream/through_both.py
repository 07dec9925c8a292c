"""What the test files that run each case through the binary and through the shim share: the
argv prefix of each (the binary, or the shim run by this interpreter) from
`OVERLAY_BIN=build/overlay FILE.py SHIM [unittest arguments]`."""
import os
import sys
import unittest


def main(by_the_binary, by_the_shim):
    """Points each test class at its tool and runs unittest on the arguments after SHIM."""
    binary = os.environ.get("OVERLAY_BIN", "")
    if not binary or len(sys.argv) < 2:
        sys.exit("usage: OVERLAY_BIN=build/overlay %s SHIM [unittest args]" % os.path.basename(sys.argv[0]))
    shim = os.path.abspath(sys.argv.pop(1))
    by_the_binary.tool = [binary]
    by_the_shim.tool = [sys.executable, shim]
    unittest.main()
