"""The GPU index order (flink_gpu.base.gpu_index)."""

import pytest

from flink_gpu.base.gpu_index import compare_indices, index_sort_order, sort_indices
from flink_gpu.flink import script_protocol


def test_sort_indices_numbers_first_by_value_then_text():
    assert sort_indices(["10", "b", "2", "a", "1"]) == ["1", "2", "10", "a", "b"]
    with pytest.raises(TypeError):
        sort_indices([1])


def test_index_sort_order_keeps_equal_indices_in_order():
    items = [("10", "x"), ("2", "y"), ("a", "z"), ("2", "w")]
    assert index_sort_order(items, lambda item: item[0]) == [("2", "y"), ("2", "w"), ("10", "x"), ("a", "z")]


def test_compare_indices_agrees_with_sort_indices():
    assert compare_indices("2", "10") == -1 and compare_indices("10", "a") == -1
    assert compare_indices("a", "a") == 0 and compare_indices("b", "a") == 1


def test_the_script_protocol_orders_by_the_same_rule():
    assert script_protocol.sort_indices is sort_indices


def test_mig_unit_indices_are_numeric_on_both_parts_after_their_gpu():
    assert sort_indices(["1", "0:10", "0:2", "0", "10", "2:0", "a"]) == ["0", "0:2", "0:10", "1", "2:0", "10", "a"]
    assert compare_indices("0:2", "0:10") == -1 and compare_indices("0:99", "1") == -1
