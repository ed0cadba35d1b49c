"""The SGLang simulator: a stand-in for ``python3 -m sglang.launch_server`` (stdlib, optional setproctitle,
Python >= 3.9), run through ``tests/simulator/sglang_sim.py``.

Simulates one SGLang version (0.5.9, 0.5.10 or 0.5.23: SGLANG_SIM_VERSION, else the version of the sglang dist-info
its interpreter sees - what the collection reads as the host's SGLang - else the newest): it takes exactly that
version's flags (parsed from the flag tables generated from the real parsers) and reproduces what a launcher can
observe of a real server: the log lines of v0.5.9/v0.5.10 ("classic") or v0.5.23 ("new"), the process tree
(schedulers titled ``sglang::scheduler_TP<i>`` dying with their parent), GPU memory held through
tests/simulator/fakegpu.py, the HTTP endpoints and their phases (connection refused -> 503 -> 200; /ready from
v0.5.23), SIGTERM handling (v0.5.23's ShutdownReq and reaping waits after the drain) and the common failures, each
version's metric names, and a dist-info that makes importlib.metadata see a version (``--make-site``). Once ready
it serves ``/generate``, ``/v1/completions`` and ``/v1/chat/completions`` (streaming too, and the schedulers' live
counts on ``/v1/loads``) through one scheduler per DP rank that behaves like SGLang's under load. Multi-node tensor
parallelism (``--nnodes``, ``--node-rank``, ``--dist-init-addr``) as in SGLang 0.5.10.

Modules, in the order a launch meets them:
  launch          main(): ``--make-model``, ``--make-site``, or a server
  settings        Sim: the run-wide settings from the SGLANG_SIM_* environment (the list is there), the versions
  faults          the SGLANG_SIM_FAULT table: one row per fault (where it strikes, what it does)
  flags           the version's command line, built from the generated flag tables plus the simulator's own options
  config          ServerArgs defaulting (ServerConfig), config.json, --make-model
  dist_info       --make-site: sglang-<version>.dist-info for importlib.metadata
  log             Logger, tqdm progress bars, scheduler log prefixes
  tracebacks      the fake tracebacks a failing scheduler logs
  processes       fork_child, PR_SET_PDEATHSIG, descendants, kill_process_tree, wait_gone, the detokenizer
  server          the main process: launch, signals and the shutdown, warmup, HTTP server, the dummy health
                  server (node rank >= 1)
  scheduler       a scheduler process: GPU, distributed init, ready report, event loop
  model_runner    its startup phases: weights, KV cache and mamba pools, CUDA graphs, draft worker
  multinode       the TCPStore rendezvous and the gloo CPU group across nodes
  serving         the tokenizer side: Serving, Streamer
  rank_scheduler  one DP rank's scheduler under load, and the Request timeline
  metrics         counters and histograms of /metrics
  routes          the generation routes' requests, replies and stream chunks
  handlers        the HTTP handlers (uvicorn on the wire), and the dummy health handler
"""
