"""Issue 37: ``--dask`` pointed at something that is not a Dask scheduler reported "3.07 EiB"
(a banner's bytes read as a frame length) or waited on a silent peer."""

from __future__ import annotations

import socket
import threading

import pytest

from paraplan.specs.errors import InputError
from paraplan.sweep import executors


_HELD: list[socket.socket] = []


def _peer(send: bytes) -> tuple[str, socket.socket]:
    """A TCP listener that sends ``send`` to whoever connects, then keeps the connection open."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = server.accept()
        _HELD.append(conn)  # open until the test ends
        conn.sendall(send)

    threading.Thread(target=serve, daemon=True).start()
    return f"tcp://127.0.0.1:{server.getsockname()[1]}", server


def test_a_banner_is_refused_in_one_line():
    address, server = _peer(b"SSH-2.0-OpenSSH_9.6\r\n")
    with server, pytest.raises(InputError) as err:
        executors._probe_dask_scheduler(address, timeout_s=5)
    assert "is not a Dask scheduler" in str(err.value) and "\n" not in str(err.value)
    assert "EiB" not in str(err.value)


def test_a_silent_peer_is_refused_after_the_probe_timeout():
    address, server = _peer(b"")
    with server, pytest.raises(InputError, match="sent nothing within 0.2 s"):
        executors._probe_dask_scheduler(address, timeout_s=0.2)


def test_a_scheduler_handshake_passes():
    address, server = _peer((58).to_bytes(8, "little") + bytes(58))
    with server:
        executors._probe_dask_scheduler(address, timeout_s=5)


def test_the_sweep_refuses_a_banner_before_dask_reads_it(tmp_path):
    pytest.importorskip("distributed")
    address, server = _peer(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    with server, pytest.raises(InputError, match="is not a Dask scheduler"):
        executors.execute([{"index": 0}], lambda record: None, dask=address)
