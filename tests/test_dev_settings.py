"""`databuild dev`'s settings, without starting anything."""

import pytest

pytestmark = pytest.mark.unit


def test_dev_serves_spark_sql_on_10000_unless_the_setting_says_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`DATABUILD_SQL_PORT=0` is off for `dev` as for a worker; unset, `dev` takes 10000 when it is free."""
    from worker.commands import DEV_SQL_PORT, dev_settings
    from worker.ports import port_taken

    monkeypatch.setenv("DATABUILD_SQL_PORT", "0")
    assert dev_settings(7233).sql_port == 0
    monkeypatch.setenv("DATABUILD_SQL_PORT", "10123")
    assert dev_settings(7233).sql_port == 10123
    monkeypatch.delenv("DATABUILD_SQL_PORT")
    assert dev_settings(7233).sql_port == (0 if port_taken("127.0.0.1", DEV_SQL_PORT) else DEV_SQL_PORT)
