"""Fixtures of doctor's tests."""

import pytest

from support.cli import write_script


@pytest.fixture
def good_script(tmp_path):
    return write_script(tmp_path / "discover.sh", 'echo "0"\n')
