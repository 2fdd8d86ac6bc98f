import pytest
from hypothesis import given
from hypothesis import strategies as st

from xputune.errors import HostDataError
from xputune.host.values import format_cpulist, parse_cpulist


def test_parse_kernel_examples() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)
    assert parse_cpulist("") == ()  # a memory-only node


@pytest.mark.parametrize("bad", ["0-", "a", "3-1", "1,,2", "-1"])
def test_garbage_names_the_file(bad: str) -> None:
    with pytest.raises(HostDataError, match="node0/cpulist"):
        parse_cpulist(bad, "/sys/devices/system/node/node0/cpulist")


@given(st.sets(st.integers(min_value=0, max_value=2048), max_size=300))
def test_format_then_parse_round_trips(cpus: set[int]) -> None:
    text = format_cpulist(cpus)
    assert parse_cpulist(text) == tuple(sorted(cpus))
    assert text == format_cpulist(parse_cpulist(text))


@given(st.text(max_size=40))
def test_parse_accepts_or_names_the_problem(text: str) -> None:
    """Any text either parses to sorted unique CPUs or raises HostDataError, nothing else."""
    try:
        cpus = parse_cpulist(text)
    except HostDataError:
        return
    assert list(cpus) == sorted(set(cpus))
    assert parse_cpulist(format_cpulist(cpus)) == cpus
