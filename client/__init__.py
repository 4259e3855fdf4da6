"""raftlog's Python client: a producer that appends exactly once, and named consumers.

    async with Connection(["http://127.0.0.1:8001"]) as connection:
        async with AsyncProducer(connection, linger_ms=5) as producer:
            pending = await producer.send(b"hello")
        print(await pending)  # Appended(index=..., term=..., pos=..., duplicate=False)

`Producer` and `Consumer` are the same for synchronous code (docs/client.md).
"""

from raftlog.client.connection import Connection, RaftlogError
from raftlog.client.consumer import AsyncConsumer, Consumer
from raftlog.client.producer import Appended, AsyncProducer, Pending, Producer
from raftlog.storage.record import Record

__all__ = ["Appended", "AsyncConsumer", "AsyncProducer", "Connection", "Consumer", "Pending", "Producer",
           "RaftlogError", "Record"]
