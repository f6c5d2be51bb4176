"""Getting processes together before ``init_rpc``: store, rendezvous, launch glue."""
