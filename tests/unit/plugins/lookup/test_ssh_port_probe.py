"""What the controller finds at a node's SSH port, for the unreachable-node explanation."""

import socket
import threading

from ansible_collections.gpuops.sglang.plugins.lookup.ssh_port_probe import probe


def listener(banner=None):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve():
        connection, _address = server.accept()
        if banner:
            connection.sendall(banner)
        threading.Event().wait(2)
        connection.close()

    threading.Thread(target=serve, daemon=True).start()
    return server


def test_a_closed_port_is_refused():
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    assert probe("127.0.0.1", port, 2) == f"port {port}: connection refused"


def test_an_sshd_answers_with_its_banner_and_a_silent_listener_is_named():
    with listener(b"SSH-2.0-OpenSSH_9.2\r\n") as sshd:
        port = sshd.getsockname()[1]
        assert probe("127.0.0.1", port, 2) == f"port {port} answers 'SSH-2.0-OpenSSH_9.2'"
    with listener() as silent:
        port = silent.getsockname()[1]
        assert probe("127.0.0.1", port, 0.5) == f"port {port} accepts connections but sent no SSH banner within 0.5 s"
