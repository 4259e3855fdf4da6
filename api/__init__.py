"""HTTP: public /v1 routes, internal peer routes, and the peer client."""
