"""A real CUDA process standing in for an SGLang server on a GPU machine.

It allocates GPU memory with torch, listens on a TCP port like a server would, prints what it holds,
and sleeps until killed. With --orphan-child it starts a child in a new session that allocates the
memory instead (the child survives a SIGKILL of the parent, like an orphaned SGLang scheduler), and
the parent only holds a small CUDA context.
"""

import argparse
import os
import socket
import subprocess
import sys
import time


def hold(gib, port):
    import torch

    block = torch.empty(int(gib * 1024**3), dtype=torch.uint8, device="cuda")
    block.fill_(1)
    torch.cuda.synchronize()
    listener = None
    if port:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
    print(f"holding {gib} GiB on cuda:0 pid={os.getpid()} port={port}", flush=True)
    while True:
        time.sleep(3600)
    return block, listener  # keeps both alive for the linter's sake; never reached


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=20)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--orphan-child", action="store_true")
    args = parser.parse_args()
    if args.orphan_child:
        child = subprocess.Popen(
            [sys.executable, __file__, "--gib", str(args.gib)],
            start_new_session=True,
        )
        print(f"parent pid={os.getpid()} started child pid={child.pid}", flush=True)
        hold(0.01, args.port)
    else:
        hold(args.gib, args.port)


if __name__ == "__main__":
    main()
