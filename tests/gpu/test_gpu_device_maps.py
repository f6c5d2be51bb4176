"""CUDA tensors through the device maps a local cluster sets at ``init_rpc``.

Each test runs its cluster in a driver script (see gpu_testlib.run_driver): the script
always shuts the cluster down, dies by SIGALRM if it hangs, and its workers are killed
by pid at the end.
"""

from __future__ import annotations

import pytest
from gpu_testlib import requires_cuda, requires_gpus, run_driver

pytestmark = [requires_cuda, pytest.mark.timeout(330)]

N = 1 << 20  # elements: 4 MiB of float32


def test_cuda_transport_maps_devices_and_tensors_stay_on_gpus(tmp_path):
    """transport="cuda": the driver's CUDA tensor reaches the GPU actor on its GPU, and the
    actor's CUDA result comes back to the driver on the GPU it left from."""
    rep = run_driver(
        tmp_path,
        f"""
        N = {N}

        @actorrt.actor(num_gpus=1)
        class Doubler:
            def where(self):
                return torch.cuda.current_device()

            def double(self, t, scale=2):
                return {{
                    "device": str(t.device),
                    "current": torch.cuda.current_device(),
                    "sum": float(t.double().sum()),
                    "out": t * scale,
                }}

        with actorrt.start(num_workers=1, transport="cuda", timeout=120) as rt:
            started(rt)
            plan = rt.plan
            report(
                transport=plan.transport,
                processes=[
                    dict(name=p.name, rank=p.rank, devices=list(p.devices),
                         device_maps=p.device_maps)
                    for p in plan.processes
                ],
            )
            d = Doubler.remote()
            current = actorrt.get(d.where.remote(), timeout=60)
            dmap = plan.for_rank(0).device_maps.get(d.worker, {{}})
            src = next(iter(dmap), "cuda:0")
            x = torch.arange(N, dtype=torch.float32, device=src)
            res = actorrt.get(d.double.remote(x), timeout=60)
            out = res.pop("out")
            # a keyword argument and a small tensor take the same road
            y = torch.tensor([1.5, -2.0], device=src)
            res_kw = actorrt.get(d.double.remote(t=y, scale=3), timeout=60)
            out_kw = res_kw.pop("out")
            report(
                worker=d.worker, current=current, src=src, target=dmap.get(src), res=res,
                out_device=str(out.device), out_ok=bool(torch.equal(out, x * 2)),
                res_kw=res_kw, out_kw_device=str(out_kw.device), out_kw=out_kw.cpu().tolist(),
            )
        """,
    )
    assert rep["transport"] == "cuda"
    procs = {p["name"]: p for p in rep["processes"]}
    assert len(procs) == 2, procs
    for p in procs.values():  # every process, driver and worker, has a map and devices
        assert p["device_maps"], p
        assert p["devices"] and all(d.startswith("cuda:") for d in p["devices"]), p
    driver = next(p for p in procs.values() if p["rank"] == 0)
    worker = procs[rep["worker"]]
    assert rep["worker"] in driver["device_maps"] and driver["name"] in worker["device_maps"]
    # the map sends the driver's device onto the actor's own GPU ...
    assert rep["target"] == f"cuda:{rep['current']}", rep
    # ... the tensor arrived there, intact ...
    assert rep["res"] == {
        "device": rep["target"],
        "current": rep["current"],
        "sum": N * (N - 1) / 2,
    }
    # ... and the CUDA result came back as CUDA, on the device it was sent from
    assert rep["out_device"] == rep["src"] and rep["out_ok"], rep
    assert rep["res_kw"]["device"] == rep["target"] and rep["res_kw"]["sum"] == -0.5
    assert rep["out_kw_device"] == rep["src"] and rep["out_kw"] == [4.5, -6.0]


def test_empty_cuda_tensors_cross_both_ways_and_the_worker_lives(tmp_path):
    """An empty CUDA tensor aborted the sending process inside TensorPipe (tensorpipe issue
    447; seen as the DQN's collectors dying on their first push of no finished episodes)."""
    rep = run_driver(
        tmp_path,
        """
        @actorrt.actor(num_gpus=1)
        class Echo:
            def echo(self, batch):
                return {k: (str(v.device), tuple(v.shape)) for k, v in batch.items()}, {
                    "none": torch.empty(0, 4, device="cuda"), "one": batch["one"] + 1,
                }

        with actorrt.start(num_workers=1, transport="cuda", timeout=120) as rt:
            started(rt)
            e = Echo.remote()
            batch = {"none": torch.empty(0, device="cuda"), "one": torch.ones(8, device="cuda")}
            seen, back = actorrt.get(e.echo.remote(batch), timeout=60)
            again = actorrt.get(e.echo.remote(batch), timeout=60)  # the worker is still there
            report(
                seen=seen, again=again[0],
                back={k: (str(v.device), tuple(v.shape)) for k, v in back.items()},
            )
        """,
    )
    assert rep["seen"]["none"] == ["cuda:0", [0]] and rep["seen"]["one"] == ["cuda:0", [8]]
    assert rep["again"] == rep["seen"]
    assert rep["back"] == {"none": ["cuda:0", [0, 4]], "one": ["cuda:0", [8]]}


@requires_gpus(2)
def test_actors_on_two_gpus_pass_cuda_tensors_gpu_to_gpu(tmp_path):
    """Two whole-GPU actors land on different GPUs; A sends a CUDA tensor to B through B's
    handle, B gets it on its own GPU, and B's CUDA reply reaches A on A's GPU."""
    rep = run_driver(
        tmp_path,
        f"""
        N = {N}

        @actorrt.actor(num_gpus=1)
        class Peer:
            def where(self):
                cur = torch.cuda.current_device()
                uuid = str(torch.cuda.get_device_properties(cur).uuid)
                return [cur, torch.cuda.device_count(), uuid]

            def receive(self, t):
                return {{
                    "device": str(t.device),
                    "current": torch.cuda.current_device(),
                    "sum": float(t.double().sum()),
                    "back": t + 1,
                }}

            def send(self, other, n):
                t = torch.arange(n, dtype=torch.float32, device="cuda")  # our current GPU
                got = actorrt.get(other.receive.remote(t), timeout=60)
                back = got.pop("back")
                got.update(
                    sender_device=str(t.device),
                    back_device=str(back.device),
                    back_ok=bool(torch.equal(back, t + 1)),
                )
                return got

        with actorrt.start(num_workers=2, timeout=120) as rt:
            started(rt)
            a = Peer.remote()
            b = Peer.remote()
            where = actorrt.get([a.where.remote(), b.where.remote()], timeout=60)
            a_to_b = actorrt.get(a.send.remote(b, N), timeout=60)
            b_to_a = actorrt.get(b.send.remote(a, 1000), timeout=60)
            plan = rt.plan
            report(
                a=a.worker, b=b.worker, where=where, a_to_b=a_to_b, b_to_a=b_to_a,
                map_ab=plan.for_name(a.worker).device_maps.get(b.worker),
                map_ba=plan.for_name(b.worker).device_maps.get(a.worker),
            )
        """,
    )
    (a_gpu, a_count, a_uuid), (b_gpu, b_count, b_uuid) = rep["where"]
    assert a_uuid != b_uuid, f"two num_gpus=1 actors share one physical GPU: {rep['where']}"
    if a_count > 1 and b_count > 1:  # processes that see both GPUs tell them apart by index
        assert a_gpu != b_gpu, rep["where"]
    assert rep["a"] != rep["b"]
    # the plan maps A's GPU onto B's and back
    assert rep["map_ab"] == {f"cuda:{a_gpu}": f"cuda:{b_gpu}"}, rep["map_ab"]
    assert rep["map_ba"] == {f"cuda:{b_gpu}": f"cuda:{a_gpu}"}, rep["map_ba"]
    for got, src, dst, n in ((rep["a_to_b"], a_gpu, b_gpu, N), (rep["b_to_a"], b_gpu, a_gpu, 1000)):
        assert got["sender_device"] == f"cuda:{src}", got
        assert got["device"] == f"cuda:{dst}" and got["current"] == dst, got
        assert got["sum"] == n * (n - 1) / 2, got
        assert got["back_device"] == f"cuda:{src}" and got["back_ok"], got
