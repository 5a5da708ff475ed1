"""What the benchmarks share: how they end."""

import os
import sys
import traceback
from collections.abc import Callable


def run_and_exit(work: Callable[[], int]) -> None:
    """Run ``work`` (it returns the exit code), report a failure plainly, and leave directly: the
    Temporal SDK can abort the interpreter at exit."""
    code = 1
    try:
        code = work()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    except SystemExit as stop:
        print(stop, file=sys.stderr)
    except Exception:
        traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
