"""Joulie loads kubernetes-asyncio's config loaders and API client without its generated APIs and
models (about 33 MiB in every process), and the whole library is still there for a caller that
asks for it."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
import joulie.kube.client
slim = sorted(m for m in sys.modules if m.startswith("kubernetes_asyncio"))
from joulie.kube.k8s_library import ApiClient, Configuration, k8s_config, full_library
configured = Configuration()
configured.host = "https://example.invalid"
library = full_library()
print(json.dumps({
    "slim": slim,
    "same_client": library.client.ApiClient is ApiClient,
    "models": hasattr(library.client, "V1Pod"),
    "loader": callable(k8s_config.load_kube_config),
}))
"""


def test_the_generated_modules_are_not_loaded_until_asked_for() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    found = json.loads(result.stdout.splitlines()[-1])
    assert len(found["slim"]) < 30, found["slim"]
    assert not any(".models." in m or ".api." in m for m in found["slim"])
    assert found["same_client"]
    assert found["models"]
    assert found["loader"]
