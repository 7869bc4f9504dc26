#!/usr/bin/env python3
"""A simulated WAN for bench scripts: a TCP forwarder on 127.0.0.1 that
delays every byte by DELAY_MS in each direction (a round trip costs
2 x DELAY_MS), in order, without limiting throughput to one chunk per delay:
a reader per direction stamps each chunk with its arrival time, and a writer
sends it on once stamp + delay has passed. The same proxy as the tests'
tests/support/wan.rs (without partitions).

    python3 bench/wan_proxy.py LISTEN_PORT BACKEND_HOST:PORT DELAY_MS

Prints nothing on success; runs until SIGINT or SIGTERM.
"""

import asyncio
import signal
import sys

CHUNK_BYTES = 16 * 1024
# Chunks in flight per direction of one connection; a reader this far ahead
# of its writer waits.
CHUNKS_IN_FLIGHT = 1024


async def pump(reader, writer, delay):
    """One direction: read as fast as the peer sends, write each chunk one
    delay after it arrived; at end of input, half-close after the last."""
    loop = asyncio.get_running_loop()
    chunks = asyncio.Queue(CHUNKS_IN_FLIGHT)

    async def read():
        try:
            while True:
                data = await reader.read(CHUNK_BYTES)
                if not data:
                    break
                await chunks.put((loop.time(), data))
        except (ConnectionError, OSError):
            pass
        # The writer is alive (it cancels this task when it ends), so the
        # end marker always finds room.
        await chunks.put(None)

    async def write():
        try:
            while True:
                item = await chunks.get()
                if item is None:
                    break
                arrived, data = item
                wait = arrived + delay - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            pass

    reading = asyncio.create_task(read())
    try:
        await write()
    finally:
        # A writer that failed leaves a reader that may wait on a full queue.
        reading.cancel()


async def serve(listen_port, backend_host, backend_port, delay):
    async def accept(client_reader, client_writer):
        try:
            backend_reader, backend_writer = await asyncio.open_connection(
                backend_host, backend_port
            )
        except OSError:
            client_writer.close()
            return
        try:
            await asyncio.gather(
                pump(client_reader, backend_writer, delay),
                pump(backend_reader, client_writer, delay),
            )
        except asyncio.CancelledError:
            # Shutting down: the connection ends with the process, quietly
            # (a cancelled handler would be logged with a traceback).
            pass
        finally:
            for w in (client_writer, backend_writer):
                w.close()

    server = await asyncio.start_server(accept, "127.0.0.1", listen_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: wan_proxy.py LISTEN_PORT BACKEND_HOST:PORT DELAY_MS")
    listen_port = int(sys.argv[1])
    host, _, port = sys.argv[2].rpartition(":")
    delay = float(sys.argv[3]) / 1000
    asyncio.run(serve(listen_port, host, int(port), delay))


if __name__ == "__main__":
    main()
