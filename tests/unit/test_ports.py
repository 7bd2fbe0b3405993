import socket

import pytest

from rtdebug.common.errors import HarnessError
from rtdebug.common.ports import check_ports_free, is_port_free, parse_rank_list, port_for_rank, ports_for_ranks


def test_port_rule_uses_global_rank():
    assert port_for_rank(5678, 0) == 5678
    assert ports_for_ranks(5678, [4, 5, 6, 7]) == [5682, 5683, 5684, 5685]


def test_range_beyond_65535_is_a_usage_error():
    with pytest.raises(HarnessError) as e:
        ports_for_ranks(65534, range(4))
    assert e.value.exit_code == 2
    assert "use a base of at most 65532" in str(e.value)


@pytest.mark.parametrize(
    "text, expect", [("none", frozenset()), ("all", None), ("0", {0}), ("0,2-3", {0, 2, 3}), (" 1 , 1 ", {1})]
)
def test_parse_rank_list(text, expect):
    assert parse_rank_list(text, 4) == expect


@pytest.mark.parametrize(
    "text, msg",
    [("a", "use none, all"), ("3-1", "use none, all"), ("4", "rank 4 >= world size 4"), ("-1", "use none, all")],
)
def test_parse_rank_list_errors(text, msg):
    with pytest.raises(HarnessError) as e:
        parse_rank_list(text, 4)
    assert msg in str(e.value) and e.value.exit_code == 2


def test_busy_port_is_reported_with_holder():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert not is_port_free(port)
        with pytest.raises(HarnessError) as e:
            check_ports_free([port])
        assert f"debug port {port} is already in use by python" in str(e.value)
    assert is_port_free(port)
