"""The tasks suite's table: actorrt against Ray, ratio per figure."""

from benchmarks import tasks


def test_the_table_gives_each_figure_and_its_ratio():
    doc = {
        "config": {"tasks_burst": 500, "tasks_stream": 800},
        "results": {
            "actorrt": {
                "tasks": {
                    "one": 0.001,
                    "burst": 0.2,
                    "pass": 0.1,
                    "nested": 0.3,
                    "stream": 0.1,
                    "stream_bp": 0.2,
                }
            },
            "ray": {
                "tasks": {
                    "one": 0.004,
                    "burst": 0.8,
                    "pass": 0.2,
                    "nested": 0.6,
                    "stream": 0.4,
                    "stream_bp": 0.1,
                }
            },
        },
    }
    lines = tasks.table(doc).splitlines()
    assert lines[1].split()[-1] == "0.25x" and lines[1].startswith("one call, get")
    assert lines[2].startswith("500 calls, get all") and lines[2].endswith("0.25x")
    assert lines[3].endswith("0.50x") and lines[4].endswith("0.50x")
    assert lines[5].startswith("800 values streamed") and lines[5].endswith("0.25x")
    assert lines[6].startswith("800, async actor, backpr. 2") and lines[6].endswith("2.00x")
    alone = tasks.table({"results": {"actorrt": doc["results"]["actorrt"]}})
    assert alone.splitlines()[1].split()[-2:] == ["-", "-"]  # no Ray: no ratio
