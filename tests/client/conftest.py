from tests.processes import make_cluster  # noqa: F401 - the fixture, for this package's tests
