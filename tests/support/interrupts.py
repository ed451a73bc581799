"""Children that Ctrl-C reaches, however the test run was started.

A run started in the background by a script (``(nohup make test > log &)``: a shell without job
control) starts with SIGINT ignored, and an ignored signal stays ignored across fork and exec.
Python then installs no KeyboardInterrupt handler, so a child of such a run never sees the Ctrl-C
a test sends it: the demo's and ``joulie status -w``'s interrupt tests failed that way, and pass
run from a terminal. The tests that interrupt a child give it the default disposition back, as
a terminal would.
"""

from __future__ import annotations

import signal


def interruptible() -> None:
    """``preexec_fn`` for a child the test will interrupt: SIGINT back to its default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
