"""Every parser an outsider can reach, fed arbitrary input: each answers with a value or with its
own error type (the one its callers turn into a clear message), never another exception, and
within a bounded time. The inputs it met in the wild are here as explicit examples: quantities
whose exponent took 26 s of exact arithmetic, bodies nested past Python's recursion limit, digits
of other scripts, a sysfs file that is /dev/zero.

Time is bounded generously (a second a call, where the holes took seconds to minutes): enough to
tell a runaway from a slow machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from joulie.agent.baseline import BOOT_ID_PATH, STATE_FILE, Baseline
from joulie.agent.settings import AgentSettings
from joulie.agent.sysfs import MAX_ATTRIBUTE_BYTES, Sysfs, SysfsError
from joulie.api.json_body import JsonBodyError, loads
from joulie.api.quantity import QuantityError, parse_quantity
from joulie.api.selector import SelectorError, parse_selector
from joulie.core.pod_power import pod_demand
from joulie.extender import wire, wire_preempt
from joulie.extender.go_json import WireError
from joulie.extender.settings import ExtenderSettings
from joulie.manager.settings import ManagerSettings
from joulie.process.settings import ProcessSettings
from joulie.settings import EnvSettings, parse_duration
from joulie.sim.settings import SimulatorSettings
from joulie.sim.trace import TraceError, parse_trace
from tests.support.fake_sysfs import FakeSysfs

SECONDS_PER_CALL = 1.0

FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@contextmanager
def bounded() -> Iterator[None]:
    started = time.perf_counter()
    yield
    assert time.perf_counter() - started < SECONDS_PER_CALL


def answers(parse: Callable[[], Any], error: type[Exception]) -> None:
    """``parse`` returns, or raises ``error`` and nothing else, in bounded time."""
    with bounded(), suppress(error):
        parse()


quantity_like = st.from_regex(
    r"[+-]?[0-9]{0,40}(\.[0-9]{0,40})?([eE][+-]?[0-9]{1,40}|[KMGTPE]i|[numkMGTPE])?",
    fullmatch=True,
)


@FUZZ
@given(st.one_of(st.text(max_size=80), quantity_like))
@example("1e20000000")
@example("1e" + "9" * 5000)
@example("9" * 100_000)
@example("\u0661")
@example("1e-999999999")
def test_quantities(text: str) -> None:
    answers(lambda: parse_quantity(text), QuantityError)


@FUZZ
@given(st.text(max_size=120))
@example("a in (b")
@example("!" * 10_000)
@example("a in (" + ",".join(["x"] * 10_000) + ")")
def test_label_selectors(text: str) -> None:
    answers(lambda: parse_selector(text), SelectorError)


@FUZZ
@given(st.one_of(st.text(max_size=40), st.from_regex(r"([0-9]{1,20}(\.[0-9]+)?(h|m|s|ms)){1,5}")))
@example("99999999999h")
@example("\u0661s")
@example("1e308")
@example("1" * 5000 + "s")
def test_durations(text: str) -> None:
    answers(lambda: parse_duration(text), ValueError)


@FUZZ
@given(st.binary(max_size=300))
@example(b"[" * 990 + b"]" * 990)
@example(b"[" * 200_000 + b"]" * 200_000)
@example(b'{"a": 1e999999}')
@example(b'"\\ud800"')
def test_json_bodies(raw: bytes) -> None:
    answers(lambda: loads(raw, max_bytes=1_000_000), JsonBodyError)


extender_body = st.one_of(
    st.binary(max_size=300),
    st.builds(
        lambda names, tail: b'{"Pod":{},"Nodes":null,"NodeNames":' + names + tail,
        st.sampled_from([b"[", b'["a","a"]', b'["a",1]', b'[""]', b"[" * 990]),
        st.sampled_from([b"}", b"]}", b"", b"]" * 990 + b"}"]),
    ),
)


@FUZZ
@given(extender_body)
@example(
    b'{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"a"},"x":' + b"[" * 990 + b"]" * 990 + b"}]}}"
)
def test_extender_calls(raw: bytes) -> None:
    lists = wire.NameLists(min_bytes=0)
    answers(lambda: wire.parse_args(raw, lists), WireError)
    answers(lambda: wire.parse_args(raw, lists), WireError)  # again, from the lists
    answers(lambda: wire_preempt.parse_preemption_args(raw), WireError)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=40,
)
pods = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"metadata": json_values, "spec": st.fixed_dictionaries({"containers": json_values})}
    ),
    st.fixed_dictionaries(
        {
            "spec": st.fixed_dictionaries(
                {
                    "containers": st.lists(
                        st.fixed_dictionaries(
                            {
                                "resources": st.fixed_dictionaries(
                                    {"requests": st.dictionaries(st.text(max_size=20), json_values)}
                                )
                            }
                        ),
                        max_size=3,
                    )
                }
            )
        }
    ),
)


@FUZZ
@given(pods)
@example({"spec": {"containers": [{"resources": {"requests": {"cpu": "1e10000000"}}}]}})
def test_pods_kube_scheduler_sends(pod: Any) -> None:
    # What the extender and the simulator read from a pod never raises at all.
    with bounded():
        pod_demand(pod if isinstance(pod, dict) else {"spec": pod})


@FUZZ
@given(st.lists(st.text(max_size=200), max_size=5))
@example(['{"type": "workload", "schemaVersion": 1, "id": ' + "[" * 990 + "]" * 990 + "}"])
@example(['{"type": "job"}', "[" * 5000])
def test_trace_lines(lines: list[str]) -> None:
    answers(lambda: parse_trace(lines, "trace.jsonl"), TraceError)


SETTINGS: list[type[EnvSettings]] = [
    ManagerSettings,
    AgentSettings,
    ExtenderSettings,
    SimulatorSettings,
    ProcessSettings,
]


@FUZZ
@given(
    st.sampled_from(SETTINGS).flatmap(
        lambda cls: st.tuples(
            st.just(cls),
            st.dictionaries(st.sampled_from(sorted(cls.model_fields)), st.text(max_size=60)),
        )
    )
)
@example((ManagerSettings, {"lifecycle_matrix_file": "\x00"}))
@example((ManagerSettings, {"gpu_model_caps_json": "[" * 3000 + "]" * 3000}))
@example((ExtenderSettings, {"extender_max_body_bytes": "1e99999999"}))
def test_settings(case: tuple[type[EnvSettings], dict[str, str]]) -> None:
    # Any environment gives settings and problems: never a traceback (a NUL in a file name
    # gave one).
    cls, values = case
    env = {cls.env_name(k): v for k, v in values.items()}
    with bounded():
        cls.from_env(env)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "root"


@FUZZ
@given(contents=st.binary(max_size=200))
@example(contents=b"9" * 5000)
@example(contents=b"\xff\xfe")
def test_sysfs_values(root: Path, contents: bytes) -> None:
    path = root / "sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(contents)
    sysfs = Sysfs(root)
    answers(
        lambda: sysfs.read_int("/sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw"),
        SysfsError,
    )


def test_a_sysfs_value_that_never_ends_is_refused(root: Path) -> None:
    # A link to /dev/zero (in a tree that is not the host's) was read until memory ran out.
    target = root / "sys/class/powercap/intel-rapl:0/energy_uj"
    target.parent.mkdir(parents=True)
    target.symlink_to("/dev/zero")
    with bounded(), pytest.raises(SysfsError, match=f"longer than {MAX_ATTRIBUTE_BYTES} bytes"):
        Sysfs(root).read("/sys/class/powercap/intel-rapl:0/energy_uj")


@FUZZ
@given(contents=st.one_of(st.text(max_size=300), st.sampled_from(["{}", "[]", "null", '{"a":1}'])))
@example(contents="[" * 100_000 + "]" * 100_000)
@example(contents='{"bootId": "x", "values": ' + "[" * 990 + "]" * 990 + "}")
def test_baseline_files(tmp_path: Path, contents: str) -> None:
    # Whatever the state file holds, the agent starts (a bad file is set aside with a note).
    tree = FakeSysfs(tmp_path / "tree")
    tree.put(BOOT_ID_PATH, "11111111-aaaa-bbbb-cccc-000000000001")
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    (state / STATE_FILE).write_text(contents)
    for leftover in state.glob(STATE_FILE + ".*"):
        leftover.unlink()
    with bounded():
        Baseline.load(state, tree)
