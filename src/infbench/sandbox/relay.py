"""How a sandboxed server is reached: ``python -m infbench.sandbox.relay --listen-fd N --port P -- COMMAND...``.

The server runs in its own network namespace, where nothing outside can connect to it and it can connect to
nothing outside. The parent creates a listening TCP socket on the host's loopback and passes it in; this
relay, the sandbox's first program, starts ``COMMAND`` (the server, listening on ``127.0.0.1:P`` inside) and
splices every connection accepted on the passed socket to it. A listening socket cannot open connections, so
the only traffic is the clients' requests and the server's answers. The relay exits with the server's status.
The relay runs inside the sandbox beside the server and is no more trusted than it: replacing it gains nothing,
since all it can do is answer the connections the parent's clients make.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
import subprocess
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _serve(listener: socket.socket, port: int, server: subprocess.Popen) -> int:
    async def relay(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", port)
        except OSError:  # not listening yet: the client sees the connection closed and retries
            client_w.close()
            return
        for w in (client_w, server_w):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(_pipe(client_r, server_w), _pipe(server_r, client_w))

    srv = await asyncio.start_server(relay, sock=listener, backlog=1024)
    async with srv:
        while server.poll() is None:
            await asyncio.sleep(0.2)
    return server.returncode


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m infbench.sandbox.relay")
    p.add_argument("--listen-fd", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    listener = socket.socket(fileno=args.listen_fd)
    listener.setblocking(False)
    try:
        server = subprocess.Popen(command, pass_fds=())
    except OSError as exc:
        print(f"launch command failed: {exc}", file=sys.stderr, flush=True)
        return 127
    signal.signal(signal.SIGTERM, lambda *_: server.terminate())
    try:
        import uvloop

        return uvloop.run(_serve(listener, args.port, server))
    except ImportError:
        return asyncio.run(_serve(listener, args.port, server))


if __name__ == "__main__":
    sys.exit(main())
