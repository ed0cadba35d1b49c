"""A tensor-parallel stand-in for SGLang on real GPUs, used as the server command of a launch script.

The main process spawns one NCCL rank per GPU the way SGLang spawns its schedulers (multiprocessing
"spawn": children inherit the environment at spawn time and die with the parent), every rank runs
all-reduces (with NCCL_DEBUG=INFO NCCL logs the settings it took from the environment), and the main
process answers /health_generate with 200 once all ranks are ready. Unknown SGLang flags are ignored.
"""

import argparse
import ctypes
import http.server
import json
import multiprocessing
import signal
import time

ALL_REDUCES = 5


def die_with_parent():
    # SGLang's kill_itself_when_parent_died(): prctl(PR_SET_PDEATHSIG, SIGKILL).
    ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)


def rank_main(rank, world, rendezvous_port, ready):
    die_with_parent()
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{rendezvous_port}", rank=rank, world_size=world)
    tensor = torch.ones(64 * 1024 * 1024, device="cuda")  # 256 MiB, large enough for the tuned buffers
    for _step in range(ALL_REDUCES):
        dist.all_reduce(tensor)
    torch.cuda.synchronize()
    print(f"rank {rank}: {ALL_REDUCES} all-reduces ok, value {tensor[0].item():.0f} "
          f"(expected {world ** ALL_REDUCES})", flush=True)
    ready.put(rank)
    while True:
        time.sleep(3600)


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path in ("/health", "/health_generate"):
            self.send_response(200)
            self.end_headers()
        elif self.path in ("/get_server_info", "/server_info"):
            body = json.dumps({"tp_size": self.server.tp_size}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_response(404)
            self.end_headers()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tp-size", "--tp", type=int, default=1)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    args, _ignored = parser.parse_known_args()
    context = multiprocessing.get_context("spawn")
    ready = context.Queue()
    ranks = [context.Process(target=rank_main, args=(rank, args.tp_size, args.port + 1, ready), name=f"tp{rank}")
             for rank in range(args.tp_size)]
    for process in ranks:
        process.start()
    for _rank in range(args.tp_size):
        ready.get(timeout=600)
    server = http.server.ThreadingHTTPServer((args.host, args.port), Health)
    server.tp_size = args.tp_size
    print(f"all {args.tp_size} ranks ready; serving on {args.host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
