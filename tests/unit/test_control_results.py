"""controlStatus values: one meaning each, whatever backend made the attempt."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from joulie.api.enums import ControlResult
from joulie.core.control import (
    ControlFacts,
    Failure,
    WriteDecision,
    combine_results,
    control_result,
    decide_write,
    same_value,
)

R = ControlResult

values = st.one_of(
    st.none(),
    st.integers(min_value=0, max_value=300_000_000),
    st.sampled_from(["performance", "powersave", "balance_power", "balance_performance"]),
)
facts = st.builds(
    ControlFacts,
    requested=st.booleans(),
    enabled=st.booleans(),
    supported=st.booleans(),
    restoring=st.booleans(),
    dry_run=st.booleans(),
    declined=st.booleans(),
    target=values,
    observed=values,
    last_written=values,
    reassert=st.booleans(),
    written=st.booleans(),
    failure=st.one_of(st.none(), st.sampled_from(list(Failure))),
    read_back=values,
    tolerance=st.integers(min_value=0, max_value=1_000_000),
)


def acting(f: ControlFacts) -> bool:
    """An attempt the agent actually carries out (not switched off, unasked or impossible)."""
    return f.restoring or (f.enabled and f.requested and f.supported)


# -- examples a user would recognise ---------------------------------------------------------


def test_a_cap_written_and_read_back_within_the_power_unit_is_applied() -> None:
    f = ControlFacts(target=150_000_000, written=True, read_back=149_875_000, tolerance=1_000_000)
    assert control_result(f) is R.APPLIED


def test_a_cap_that_reads_back_otherwise_is_drift() -> None:
    f = ControlFacts(target=150_000_000, written=True, read_back=120_000_000, tolerance=1_000_000)
    assert control_result(f) is R.DRIFT


def test_a_bios_locked_limit_is_refused() -> None:
    assert control_result(ControlFacts(target=1, failure=Failure.PERMISSION)) is R.REFUSED


def test_a_rejected_value_is_an_error() -> None:
    assert control_result(ControlFacts(target="turbo", failure=Failure.REJECTED)) is R.ERROR


def test_already_at_the_value_is_equivalent() -> None:
    assert control_result(ControlFacts(target="powersave", observed="powersave\n")) is R.EQUIVALENT


def test_another_writer_since_our_write_is_contended() -> None:
    f = ControlFacts(target="powersave", observed="performance", last_written="powersave")
    assert decide_write("powersave", "performance", "powersave") is WriteDecision.CONTENDED
    assert control_result(f) is R.CONTENDED
    # Once the back-off has passed, or for a new target, the agent writes again.
    assert (
        decide_write("powersave", "performance", "powersave", reassert=True) is WriteDecision.WRITE
    )
    assert decide_write("balanced", "performance", "powersave") is WriteDecision.WRITE


def test_write_without_a_reading_is_unverified() -> None:
    assert control_result(ControlFacts(target=5, written=True)) is R.APPLIED_UNVERIFIED


def test_switched_off_unsupported_dry_run_and_restored() -> None:
    assert control_result(ControlFacts(enabled=False, target=1)) is R.DISABLED
    assert control_result(ControlFacts(supported=False, target=1)) is R.UNSUPPORTED
    assert control_result(ControlFacts(dry_run=True, target=1, observed=2)) is R.NOT_APPLIED
    assert control_result(ControlFacts(declined=True, target=1, observed=2)) is R.NOT_APPLIED
    restore = ControlFacts(restoring=True, target="powersave", written=True, read_back="powersave")
    assert control_result(restore) is R.RESTORED
    assert control_result(ControlFacts(restoring=True, target=7, observed=7)) is R.RESTORED


# -- invariants --------------------------------------------------------------------------------


@given(facts)
def test_every_combination_of_facts_has_exactly_one_result(f: ControlFacts) -> None:
    assert control_result(f) in set(ControlResult)


@given(facts)
def test_applied_only_when_written_and_read_back_the_same(f: ControlFacts) -> None:
    if control_result(f) is R.APPLIED:
        assert f.written
        assert f.failure is None
        assert not f.restoring
        assert same_value(f.read_back, f.target, f.tolerance)


@given(facts)
def test_drift_is_exactly_a_write_that_reads_back_different(f: ControlFacts) -> None:
    drift = (
        acting(f)
        and f.failure is None
        and f.written
        and f.target is not None
        and f.read_back is not None
        and not same_value(f.read_back, f.target, f.tolerance)
    )
    assert (control_result(f) is R.DRIFT) == drift


@given(facts)
def test_a_permission_failure_is_always_refused(f: ControlFacts) -> None:
    if acting(f) and f.failure is Failure.PERMISSION:
        assert control_result(f) is R.REFUSED


@given(facts)
def test_switched_off_is_disabled_and_never_anything_written(f: ControlFacts) -> None:
    if not f.enabled and not f.restoring:
        assert control_result(f) is R.DISABLED


@given(facts)
def test_each_result_only_where_its_meaning_holds(f: ControlFacts) -> None:
    result = control_result(f)
    if result in (R.EQUIVALENT, R.CONTENDED, R.UNSUPPORTED):
        assert not (f.written and f.failure is None and acting(f) and f.supported)
    if result is R.RESTORED:
        assert f.restoring
    if result in (R.APPLIED, R.APPLIED_UNVERIFIED, R.EQUIVALENT, R.CONTENDED):
        assert f.enabled
        assert f.requested
        assert f.supported
        assert not f.restoring


@given(values, values, values, st.integers(min_value=0, max_value=10), st.booleans())
def test_write_decision_agrees_with_equivalence(
    target: str | int | None,
    observed: str | int | None,
    last: str | int | None,
    tolerance: int,
    reassert: bool,
) -> None:
    if target is None:
        return
    decision = decide_write(target, observed, last, tolerance=tolerance, reassert=reassert)
    assert (decision is WriteDecision.EQUIVALENT) == same_value(observed, target, tolerance)
    if reassert or last is None:
        assert decision is not WriteDecision.CONTENDED


@given(st.lists(st.sampled_from(list(ControlResult)), min_size=1), st.randoms())
def test_a_component_result_hides_no_failure(results: list[ControlResult], rnd: object) -> None:
    combined = combine_results(results)
    assert combined in results
    shuffled = list(results)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert combine_results(shuffled) is combined
    assert combined is not None
    assert combine_results([combined, *results]) is combined
    for failure in (R.ERROR, R.REFUSED, R.DRIFT):
        if failure in results:
            assert combined in (R.ERROR, R.REFUSED, R.DRIFT)
            break


def test_no_settings_no_result() -> None:
    assert combine_results([]) is None
    assert combine_results([R.APPLIED, R.EQUIVALENT]) is R.APPLIED
    assert combine_results([R.APPLIED, R.REFUSED]) is R.REFUSED
