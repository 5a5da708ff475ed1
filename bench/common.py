"""What the benchmarks that drive Temporal share: settings for their dev server, and how they end."""

import os
import sys
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path

from temporalio.client import Client

from databuild.config import Settings


def dev_server_settings(client: Client, home: Path, graph: str, **extra: object) -> Settings:
    """Settings of a bench's own stack on the dev server ``client`` is connected to: a fresh task queue,
    with the BEL and storage under ``home``."""
    return Settings.model_validate(
        {
            "home": home,
            "temporal_address": client.service_client.config.target_host,
            "namespace": client.namespace,
            "task_queue": f"bench-{uuid.uuid4().hex[:8]}",
            "graph": graph,
            **extra,
        }
    )


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
