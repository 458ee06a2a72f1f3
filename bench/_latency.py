"""A loopback TCP relay in front of a local S3 server that holds every request back by a fixed delay.

moto's server on 127.0.0.1 answers with well under a millisecond of network time, where an object store takes some
tens of milliseconds a request. Benchmarks that ask how a cost grows with requests put this relay between the
client and moto: each chunk the client sends (a request, on a kept-alive connection) is forwarded ``delay`` seconds
after it arrived, as a request's round trip would take; responses pass at once. The relay is a process of its own
(so that it takes no GIL from the process measured), ended with the process that started it.

    python bench/_latency.py HOST:PORT SECONDS   # prints the relay's HOST:PORT, then serves
"""

from __future__ import annotations

import asyncio
import subprocess
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    try:
        while chunk := await reader.read(1 << 16):
            if delay:
                await asyncio.sleep(delay)
            writer.write(chunk)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def _serve(host: str, port: int, delay: float) -> None:
    async def relay(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection(host, port)
        await asyncio.gather(_pipe(client_reader, server_writer, delay), _pipe(server_reader, client_writer, 0.0))

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    print(f"127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def delayed_endpoint(endpoint: str, delay: float) -> tuple[subprocess.Popen[str], str]:
    """A relay to ``endpoint`` (``host:port``) that delays every request by ``delay`` seconds, and its
    ``host:port``; kill the process when done."""
    relay = subprocess.Popen(
        [sys.executable, __file__, endpoint, str(delay)], stdout=subprocess.PIPE, text=True, bufsize=1
    )
    assert relay.stdout is not None
    return relay, relay.stdout.readline().strip()


if __name__ == "__main__":
    target, seconds = sys.argv[1], float(sys.argv[2])
    target_host, target_port = target.rsplit(":", 1)
    asyncio.run(_serve(target_host, int(target_port), seconds))
