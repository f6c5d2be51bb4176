"""What a new user trips on: each mistake gets one clear line, in the help's words."""

from __future__ import annotations

import argparse

import pytest

from actorrt.cli import main
from actorrt.cluster.launch_env import (
    CUDA_DEVICE_MAP_FORM,
    check_cuda_device_map,
    parse_tcp_init_method,
)
from actorrt.cluster.worker_cli import add_arguments, config_from_args
from actorrt.errors import PlacementError
from actorrt.placement import load_cluster
from actorrt.placement.render import check_draw_path

EXAMPLE_NODE = '[[nodes]]\nhostname = "h"\n'


def worker_args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(list(argv))


# --cuda-device-map / cuda_device_map


def test_worker_help_and_messages_use_the_same_words():
    p = argparse.ArgumentParser()
    add_arguments(p)
    assert CUDA_DEVICE_MAP_FORM in " ".join(p.format_help().split())  # unwrapped
    with pytest.raises(ValueError, match="<peer rank>_<local gpu>_<peer gpu>"):
        check_cuda_device_map("1-0-1", rank=1, world_size=3)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("1_0", "is not <peer rank>_<local gpu>_<peer gpu>"),
        ("a_0_1", "is not <peer rank>_<local gpu>_<peer gpu>"),
        ("1_-1_0", "is not <peer rank>_<local gpu>_<peer gpu>"),
        ("3_0_1", "<peer rank> 3 is not in the cluster .world size 3: ranks 0..2"),
        ("1_0_0", "<peer rank> 1 is this process's own rank"),
        ("0_0_1,0_0_2", "<local gpu> 0 is already mapped to GPU 1 of rank 0"),
        ("0_0_1,0_1_1", "<peer gpu> 1 of rank 0 is already the target"),
    ],
)
def test_bad_device_maps_are_named(text, match):
    with pytest.raises(ValueError, match=match):
        check_cuda_device_map(text, rank=1, world_size=3)


def test_good_device_maps_pass():
    check_cuda_device_map(None, rank=0, world_size=2)
    check_cuda_device_map("", rank=0, world_size=2)
    check_cuda_device_map(" 1_0_1, 2_0_2 ,1_1_0", rank=0, world_size=3, name="cuda_device_map")
    with pytest.raises(ValueError, match="cuda_device_map=5 must be a string"):
        check_cuda_device_map(5, rank=0, world_size=3, name="cuda_device_map")  # type: ignore[arg-type]


def test_worker_checks_its_map_before_joining():
    args = worker_args(
        "--init-method", "tcp://127.0.0.1:29500", "--rank", "1", "--world-size", "2",
        "--cuda-device-map", "5_0_0",
    )  # fmt: skip
    with pytest.raises(ValueError, match="--cuda-device-map: <peer rank> 5 is not in the cluster"):
        config_from_args(args, environ={})


def test_worker_command_prints_one_line_and_exits_2(capsys):
    argv = ["worker", "--init-method", "tcp://127.0.0.1:29500", "--rank", "1"]
    assert main([*argv, "--world-size", "2", "--cuda-device-map", "0:0:1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("actorrt worker: --cuda-device-map")
    assert "<peer rank>_<local gpu>_<peer gpu>" in err


# init_method


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("tcp://h:99999", "PORT 99999 is out of range, a port is 1..65535;"),
        ("tcp://h:0", "PORT 0 .any free port."),
        ("tcp://h:port", "PORT 'port' is not a port number"),
        ("tcp://h", "names no PORT"),
        ("tcp://:29500", "names no HOST"),
        ("h:29500", "has no scheme"),
        ("http://h:29500", "the scheme is 'http'"),
        ("tcp://fe80::1:29500", "an IPv6 HOST goes in brackets"),
        ("tcp://h:29500/x", "nothing may come before HOST or after PORT"),
    ],
)
def test_bad_init_methods_say_which_part_and_how_to_write_it(text, match):
    with pytest.raises(ValueError, match=match) as e:
        parse_tcp_init_method(text)
    assert "it must look like 'tcp://HOST:PORT' (e.g. tcp://10.0.0.1:29500" in str(e.value)
    assert str(e.value).startswith(f"init_method={text!r}")


def test_good_init_methods():
    assert parse_tcp_init_method("tcp://10.0.0.1:29500") == ("10.0.0.1", 29500)
    assert parse_tcp_init_method(" tcp://node-1:1/ ") == ("node-1", 1)
    assert parse_tcp_init_method("tcp://[fe80::1]:65535") == ("fe80::1", 65535)


def test_worker_names_where_the_address_came_from():
    args = worker_args("--rank", "1", "--world-size", "2")
    with pytest.raises(ValueError, match="^ACTORRT_INIT_METHOD='tcp://h:99999': PORT 99999"):
        config_from_args(args, environ={"ACTORRT_INIT_METHOD": "tcp://h:99999"})
    with pytest.raises(ValueError, match=r"^--init-method='tcp://h:99999'"):
        config_from_args(worker_args("--init-method", "tcp://h:99999", "--rank", "1",
                                     "--world-size", "2"), environ={})  # fmt: skip
    torchrun = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "h", "MASTER_PORT": "65535"}
    with pytest.raises(ValueError, match="MASTER_ADDR.*PORT 65536 is out of range"):
        config_from_args(worker_args(), environ=torchrun)


# actorrt plan: --draw, unreadable files, bad counts


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("missing/x.png", "folder .*missing does not exist"),
        ("x.xyz", r"unknown format '\.xyz'; name the file \.png, \.svg, \.pdf"),
        ("x", "no extension"),
    ],
)
def test_plan_draw_to_a_bad_path_is_one_line_and_exit_2(tmp_path, capsys, name, match):
    cluster = tmp_path / "c.toml"
    cluster.write_text(EXAMPLE_NODE)
    assert main(["plan", str(cluster), "--draw", str(tmp_path / name)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.count("\n") == 0 and err.startswith("actorrt plan: cannot draw to ")
    assert "Traceback" not in err and captured.out == ""
    with pytest.raises(PlacementError, match=match):
        check_draw_path(tmp_path / name)


def test_draw_path_that_is_a_folder(tmp_path):
    (tmp_path / "d.png").mkdir()
    with pytest.raises(PlacementError, match="it is a folder"):
        check_draw_path(tmp_path / "d.png")
    assert check_draw_path(tmp_path / "ok.SVG") == tmp_path / "ok.SVG"


def test_non_utf8_cluster_file_is_one_line_and_exit_2(tmp_path, capsys):
    f = tmp_path / "latin1.toml"
    f.write_bytes('[[nodes]]\nhostname = "caf\xe9"\n'.encode("latin-1"))
    assert main(["plan", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "is not UTF-8 text" in err and "save it as UTF-8" in err


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("processes = 0\n", r"nodes\[0\]\.processes: expected a count >= 1"),
        ("processes = -2\n", r"nodes\[0\]\.processes: expected a count >= 1"),
        ("processes = []\n", r"nodes\[0\]\.processes: expected a count >= 1 or a non-empty"),
        ("processes = [{ count = 0 }]\n", r"processes\[0\]\.count: expected an integer >= 1"),
        ("num_cpus = -4\n", r"nodes\[0\]\.num_cpus: expected an integer >= 1"),
        ("num_cpus = 0\n", r"nodes\[0\]\.num_cpus: expected an integer >= 1"),
        ('num_cpus = "8"\n', r"nodes\[0\]\.num_cpus: expected an integer >= 1"),
    ],
)
def test_bad_counts_in_a_cluster_file_are_refused(tmp_path, body, match):
    f = tmp_path / "c.toml"
    f.write_text(EXAMPLE_NODE + body)
    with pytest.raises(PlacementError, match=match):
        load_cluster(f)


def test_bad_num_cpus_in_verbatim_processes_is_refused(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[[processes]]\nname = "p"\nnode = { hostname = "h", num_cpus = -1 }\n')
    with pytest.raises(PlacementError, match=r"processes\[0\]\.node\.num_cpus"):
        load_cluster(f)


def test_negative_num_cpus_in_a_layout_is_refused(tmp_path, capsys):
    f = tmp_path / "c.toml"
    f.write_text("[labels]\nlearner = { num_cpus = -1 }\n" + EXAMPLE_NODE)
    assert main(["plan", str(f)]) == 2
    assert "num_cpus=-1 must be a number >= 0" in capsys.readouterr().err


def test_plan_piped_into_a_reader_that_stops_early_exits_quietly(tmp_path):
    import subprocess
    import sys

    # 16 hosts x 8 processes: the --json plan is far larger than a pipe's buffer, so the
    # writer is still writing when `head` exits.
    nodes = "".join(f'[[nodes]]\nhostname = "n{h:02d}"\nprocesses = 8\n\n' for h in range(16))
    cluster = tmp_path / "big.toml"
    cluster.write_text(nodes)
    cmd = f"{sys.executable} -m actorrt plan {cluster} --json | head -c 100"
    out = subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=120
    )
    assert "Traceback" not in out.stderr and "BrokenPipeError" not in out.stderr, out.stderr
    assert out.returncode == 0, out.stderr


def test_plan_with_a_negative_matrix_bound_is_one_line_and_exit_2(tmp_path, capsys):
    cluster = tmp_path / "c.toml"
    cluster.write_text(EXAMPLE_NODE)
    assert main(["plan", str(cluster), "--max-matrix", "-1"]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == "actorrt plan: --max-matrix -1 must be >= 0"
    assert captured.out == ""


def test_a_bad_label_in_a_layout_file_names_the_file(tmp_path, capsys):
    cluster, layout = tmp_path / "c.toml", tmp_path / "layout.toml"
    cluster.write_text(EXAMPLE_NODE)
    layout.write_text("[labels]\nlearner = { count = -1 }\n")
    assert main(["plan", str(cluster), "--labels", str(layout)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"actorrt plan: layout file {layout}: label 'learner': count must be an integer >= 0, "
        "got -1"
    ), err
