"""Claims made while a cluster runs: rank 0's decision, the plan it hands over, the proof.

A real ``TCPStore`` on loopback and the judge's poll, called by hand: no RPC, no process.
"""

from __future__ import annotations

import json
import threading

import pytest

from actorrt.cluster import rendezvous
from actorrt.errors import ClusterError

TOKEN = "late-claims-token"


@pytest.fixture
def server():
    srv = rendezvous.StoreServer("127.0.0.1", 0, timeout=10)
    srv.judge = rendezvous._Judge(srv, 2, TOKEN, None)  # the one gather() would make
    yield srv
    srv.close()


def _claim(server, rank, token=TOKEN):
    store = rendezvous.connect_store("127.0.0.1", server.port, 10)
    return rendezvous.RankClaim(store, rank, 2, token, {"hostname": "h"})


def test_a_late_claim_gets_the_plan_rank_0_decided_and_waits_while_undecided(server):
    seen = []

    def decide(claim, waited):
        seen.append(claim["rank"])
        if len(seen) < 3:
            return None  # not yet: asked again next round
        return {"processes": [], "join": {"rank": 5, "rpc_id": 9}}

    claim = _claim(server, rendezvous.GROW_RANK)
    for _ in range(3):
        server.judge.poll(late=decide)
    assert seen == [0, 0, 0]
    assert claim.wait_verdict(5) == {"processes": [], "join": {"rank": 5, "rpc_id": 9}}
    # read once, and gone
    assert not server.store.check([f"actorrt/assigned/{claim.index}"])


def test_a_late_refusal_and_a_wrong_token_say_why(server):
    refused = _claim(server, 1)
    intruder = _claim(server, 1, token="another")
    server.judge.poll(late=lambda claim, waited: "rank 1 (worker1) is running")
    with pytest.raises(ClusterError, match="rank 1 was refused by the cluster: rank 1 .* running"):
        refused.wait_verdict(5)
    with pytest.raises(ClusterError, match="wrong cluster token"):
        intruder.wait_verdict(5)


def test_a_decision_that_fails_refuses_the_claim_and_the_judge_goes_on(server):
    def broken(claim, waited):
        raise KeyError("gpus")

    claim = _claim(server, rendezvous.GROW_RANK)
    server.judge.poll(late=broken)
    with pytest.raises(ClusterError, match="a new rank was refused.*could not take it in"):
        claim.wait_verdict(5)


def test_a_proof_copied_from_the_store_proves_no_other_claim(server):
    store = rendezvous.connect_store("127.0.0.1", server.port, 10)
    real = rendezvous.RankClaim(store, 1, 2, TOKEN, {"hostname": "h"})
    copied = json.loads(store.get(f"actorrt/claim/{real.index}"))  # what a reader sees
    index = store.add("actorrt/claims", 1)  # the reader's own claim, with the copy
    store.set(f"actorrt/claim/{index}", json.dumps(copied))
    decided = []

    def decide(claim, waited):
        decided.append(claim)
        return {"join": {"rank": 1, "rpc_id": 7}}

    server.judge.poll(late=decide)
    assert len(decided) == 1  # the copy was refused before rank 0 was asked
    assert real.wait_verdict(5) == {"join": {"rank": 1, "rpc_id": 7}}
    verdict = store.get(f"actorrt/verdict/{index}").decode()
    assert "wrong cluster token" in verdict


def test_after_stop_every_claim_hears_the_cluster_is_shutting_down(server):
    stop = threading.Event()
    rendezvous.serve_late_claims(server, stop, lambda claim, waited: None, period=0.05)
    claim = _claim(server, 1)
    stop.set()
    with pytest.raises(ClusterError, match="shutting down"):
        claim.wait_verdict(5)


def test_a_late_claim_for_another_transport_is_refused_before_rank_0_is_asked(server):
    server.judge = rendezvous._Judge(server, 2, TOKEN, "auto")
    store = rendezvous.connect_store("127.0.0.1", server.port, 10)
    claim = rendezvous.RankClaim(store, 1, 2, TOKEN, {"hostname": "h", "transport": "cpu"})
    asked = []
    server.judge.poll(late=lambda claim, waited: asked.append(claim) or {"join": {}})
    with pytest.raises(ClusterError, match="asks for --transport cpu but the driver uses"):
        claim.wait_verdict(5)
    assert asked == []
