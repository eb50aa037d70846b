"""The CLI's tables line up as the f-strings they replaced did, and a bad column spec says how to write one."""

from __future__ import annotations

import pytest

from wattwise.readable import Column, columns_of, or_dash, table_lines


def test_columns_pad_and_align_as_format_does_and_a_wide_cell_pushes_the_rest_along() -> None:
    columns = columns_of("job:<8", "runs:>5", "key")
    lines = table_lines(columns, [("a", 3, "k1"), ("much-longer-job", 12, "k2")])
    assert lines == [
        f"{'job':<8} {'runs':>5} key",
        f"{'a':<8} {3:>5} k1",
        f"{'much-longer-job':<8} {12:>5} k2",
    ]
    assert lines[2].startswith("much-longer-job    12 ")  # not cut


def test_separator_indent_and_padded_last_column() -> None:
    columns = (Column("", 4), Column("x", 3))
    assert table_lines(columns, [("ab", "c")], sep="  ", indent="> ") == [">       x  ", "> ab    c  "]


@pytest.mark.parametrize("spec", ["job:^8", "job:<", "job:<x"])
def test_a_column_spec_that_is_neither_left_nor_right_says_how_to_write_one(spec: str) -> None:
    with pytest.raises(ValueError, match="title:<width or title:>width"):
        columns_of(spec)


def test_an_unknown_figure_is_a_dash_and_a_known_one_is_formatted_by_its_spec() -> None:
    assert (or_dash(None, "g"), or_dash(175.0, "g"), or_dash(0.123456, ".3g")) == ("-", "175", "0.123")
