"""The launch: the driver, the rendezvous before ``init_rpc``, local workers, the worker command.

Everything that gets processes together and into one RPC group (see
:mod:`actorrt.cluster.join`); what runs once they are there is :mod:`actorrt.runtime`.
"""
