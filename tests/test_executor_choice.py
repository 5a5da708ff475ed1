"""How the settings choose a graph's job executors, per graph and per job, and refuse what cannot run:
nothing starts (the executors themselves: tests/test_executors.py)."""

from pathlib import Path

import pytest

from databuild.bel.store import BuildEventLog
from databuild.config import Settings
from databuild.errors import InvalidInputError
from databuild.graph import load_graph
from databuild.jobs.executors import Executors
from databuild.jobs.executors.connect import ConnectExecutor
from databuild.jobs.executors.session import SessionExecutor
from databuild.jobs.executors.submit import SubmitExecutor
from databuild.jobs.spark import SparkRuntime
from databuild.jobs.storage import Storage

pytestmark = pytest.mark.unit


def test_settings_choose_executors_per_graph_and_per_job(tmp_path: Path) -> None:
    graph = load_graph("examples.demo:graph")
    storage = Storage(tmp_path / "lake")
    bel = BuildEventLog.create(f"sqlite:///{tmp_path / 'bel.sqlite'}")
    spark = SparkRuntime()  # never started: choosing executors starts nothing

    def executors(**values: object) -> Executors:
        settings = Settings.from_env(home=tmp_path, **values)
        return Executors.from_settings(settings, graph=graph, bel=bel, storage=storage, spark=spark)

    plain = executors()
    assert isinstance(plain.for_job("weekly_rollup"), SessionExecutor)
    mixed = executors(job_executors="weekly_rollup=submit, daily_users = submit")
    assert isinstance(mixed.for_job("weekly_rollup"), SubmitExecutor)
    assert mixed.for_job("daily_users") is mixed.for_job("weekly_rollup")  # one executor per kind
    assert isinstance(mixed.for_job("raw_events"), SessionExecutor)
    # Whichever executor runs a body, what it builds records the version of the worker's graph.
    assert mixed.versions == {job.label: job.version for job in graph.jobs} and all(mixed.versions.values())
    remote = executors(
        executor="connect", spark_connect_url="sc://spark:15002", job_executors="raw_events=submit"
    )
    assert isinstance(remote.default, ConnectExecutor) and isinstance(
        remote.for_job("raw_events"), SubmitExecutor
    )
    args = "--conf spark.cores.max=1 --name 'a b'"
    submit = executors(
        executor="submit", spark_submit_master="spark://m:7077", spark_submit_args=args
    ).default
    assert isinstance(submit, SubmitExecutor)
    assert submit.options.master == "spark://m:7077"
    assert submit.options.extra_args == ("--conf", "spark.cores.max=1", "--name", "a b")

    refused = {
        "unknown": (dict(job_executors="weekly_rolup=submit"), "DATABUILD_JOB_EXECUTORS names weekly_rolup"),
        "both in-process": (
            dict(executor="connect", spark_connect_url="sc://h:15002", job_executors="raw_events=session"),
            "both its own SparkSession",
        ),
        "no url": (dict(executor="connect"), "needs DATABUILD_SPARK_CONNECT_URL"),
        "no spark-submit": (
            dict(executor="submit", spark_submit=tmp_path / "nope"),
            "DATABUILD_SPARK_SUBMIT=.* is not",
        ),
    }
    for name, (values, message) in refused.items():
        with pytest.raises(InvalidInputError, match=message):
            executors(**values)
        print("refused:", name)
    for values, variable in [
        (dict(executor="gpu"), "DATABUILD_EXECUTOR"),
        (dict(job_executors="weekly_rollup"), "DATABUILD_JOB_EXECUTORS"),
        (dict(job_executors="weekly_rollup=gpu"), "DATABUILD_JOB_EXECUTORS"),
        (dict(spark_connect_url="http://spark:15002"), "DATABUILD_SPARK_CONNECT_URL"),
        (dict(spark_connect_url="sc://spark:99999"), "DATABUILD_SPARK_CONNECT_URL"),
    ]:
        with pytest.raises(InvalidInputError, match=variable):
            Settings.from_env(home=tmp_path, **values)
    bel.dispose()
