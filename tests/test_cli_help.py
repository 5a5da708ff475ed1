"""`databuild --help` lists each command by its docstring's first paragraph as one flowing text, wrapped
to the terminal, not broken where the source's lines end."""

import pytest
from typer.testing import CliRunner

from databuild.cli import app

pytestmark = pytest.mark.unit


def test_the_command_list_joins_each_summarys_lines() -> None:
    listed = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert listed.exit_code == 0, listed.output
    # Both phrases span a line break in their commands' docstrings.
    assert "Asking again registers nothing new" in listed.output
    assert "record nothing; with --fresh: rebuild it" in listed.output
