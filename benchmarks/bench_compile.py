"""torch.compile through DeviceKit against torch's CPU, on an HF GPT-2.

Sides: ``dk`` (the model on ``dk:0``, the CPU plugin, under
``torch.compile(backend="devicekit")``: lowered graphs replayed as device
graphs), ``dk-step`` (``train`` only: the same compiled model, its whole
training step, forward, cross-entropy, backward and SGD, captured once with
``devicekit.torch.graph`` after one warm-up call, each later call one replay
on a static batch; docs/torch_compile.md, "A whole training step as one
graph"; its compile is dk's, shared: its ``first 2 calls`` are the warm-up
and the capture), ``eager`` (torch eager on the CPU) and ``inductor``
(``torch.compile(backend="inductor")`` on the CPU; needs a C++ compiler).
Tasks: ``train``, one training step (forward, cross-entropy, backward, SGD
step) on a batch; ``decode``, a greedy decode of 64 tokens (batch 1; each
token recomputes the last ``block`` tokens with no KV cache, so every call
has one shape and one compiled graph serves them all); ``kvdecode``, greedy
decoding with transformers' KV cache (batch 1, a ``StaticCache`` of
``block`` positions, so every token is one call of one shape: the dk side
replays one device graph per token): an 8-token prompt (prefill run eagerly,
not timed), then ``block - 8`` tokens, each timed on its own (per-token
rows: median and spread over every token of every round). Sizes: ``nano``
(2 layers, d_model 64, block 32) and ``small`` (4 layers, d_model 256,
block 128); batch 8 for training.

Sides alternate round by round (a load change on a shared machine hits every
side alike); each row gives the median and the spread (min, max) in ms. In a
round each side runs ``--block`` calls in a row (train and decode; default
4), each timed: ``after switch`` is the median of each block's first call,
which runs right after the other sides' calls, ``steady`` the median of the
others, as calls follow one another in a training run or a serving loop.
On this project's 2-core virtual machines every side's first call after the
others' is the slower (torch eager's by about 1.1-1.4x, DeviceKit's compiled
calls' by 1.2-1.4x at 1 thread and up to 2.4x at 2 threads, where torch's
OpenMP workers still spin after its calls, the whole-step replay's by
1.1-1.2x; see docs/torch_compile.md, "Speed"). ``--block 1`` times
first calls only. The first call (compile + warm-up) is timed apart:
``compile s``. Each thread
count runs in its own process (``DEVICEKIT_CPU_THREADS`` and
``torch.set_num_threads`` are read at start-up).
Each size starts from ``torch._dynamo.reset()``: Dynamo keeps at most
``recompile_limit`` (8) compiled entries per code object, every side and size
runs the same ``GPT2LMHeadModel.forward``, and past the limit it runs the
frame eagerly without an error; a compiled side whose first calls compiled
no graph is marked in its row ("ran eagerly"), so such a run cannot pass
for a compiled one.

    python benchmarks/bench_compile.py                    # 1 and 2 threads, every side
    python benchmarks/bench_compile.py --sizes nano --sides dk,eager --rounds 5
    python benchmarks/bench_compile.py --sizes nano --tasks kvdecode --threads 1
"""

import argparse
import json
import os
import subprocess
import sys
import time

SIZES = {"nano": dict(n_layer=2, n_embd=64, n_head=4, n_positions=32),
         "small": dict(n_layer=4, n_embd=256, n_head=4, n_positions=128)}
VOCAB, BATCH, TOKENS = 131, 8, 64
KV_PROMPT = 8
TASKS = ("train", "decode", "kvdecode")


def _model(size):
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    cfg = transformers.GPT2Config(vocab_size=VOCAB, bos_token_id=0, eos_token_id=0,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                  use_cache=False, **SIZES[size])
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(cfg)


def _side(name, size):
    """(train_step, decode, kv_decode, finish, tokens) for one side; a task
    the side does not run is None."""
    import torch
    import transformers
    dev = "dk:0" if name.startswith("dk") else "cpu"
    model = _model(size).to(dev)
    block = SIZES[size]["n_positions"]
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (BATCH, block), generator=g).to(dev)
    prompt = torch.randint(0, VOCAB, (1, block), generator=g).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    fwd = model if name == "eager" else torch.compile(
        model, backend="devicekit" if dev != "cpu" else "inductor")

    def train():
        logits = fwd(ids).logits
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB),
                                                 ids[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    def decode():
        window = prompt
        out = []
        with torch.no_grad():
            for _ in range(TOKENS):
                nxt = fwd(window).logits[:, -1].argmax(-1, keepdim=True)
                out.append(nxt)
                window = torch.cat([window[:, 1:], nxt], 1)
        return torch.cat(out, 1).cpu()

    def finish():
        if dev != "cpu":
            torch.dk.synchronize()

    whole = {}  # dk-step: the captured step and its loss

    def train_step_graph():
        if "graph" in whole:
            whole["graph"].replay()
            return whole["loss"]
        if not whole:  # warm-up: compiles, fills the bridge's caches
            whole["warm"] = True
            return train()
        import devicekit.torch as dkt
        g = dkt.DKGraph()
        with dkt.graph(g):
            loss = train()  # recorded, not run
        whole.update(graph=g, loss=loss)
        g.replay()
        return loss

    # the KV cache: one StaticCache, emptied before each decode (a new one
    # would be a new Dynamo input, so a recompile)
    cache = transformers.StaticCache(config=model.config, max_cache_len=block)
    kv_prompt = prompt[:, :KV_PROMPT]
    prefill_pos = torch.arange(KV_PROMPT, device=dev)
    positions = [torch.tensor([p], device=dev) for p in range(KV_PROMPT, block)]
    tokens = {}

    def kv_decode():
        """Per-token ms of one greedy decode with the KV cache."""
        cache.reset()
        ms, out = [], []
        with torch.no_grad():
            o = model(input_ids=kv_prompt, past_key_values=cache, use_cache=True,
                      cache_position=prefill_pos)
            nxt = o.logits[:, -1:].argmax(-1)
            finish()
            for pos in positions:
                t0 = time.perf_counter()
                o = fwd(input_ids=nxt, past_key_values=cache, use_cache=True,
                        cache_position=pos)
                nxt = o.logits[:, -1:].argmax(-1)
                finish()
                ms.append((time.perf_counter() - t0) * 1e3)
                out.append(nxt)
        tokens["last"] = torch.cat(out, 1).cpu()
        return ms

    if name == "dk-step":
        return train_step_graph, None, None, finish, tokens
    return train, decode, kv_decode, finish, tokens


def _median(v):
    return sorted(v)[len(v) // 2]


def _child(args):
    import torch
    torch.set_num_threads(args.threads)
    if any(s.startswith("dk") for s in args.sides):
        import devicekit.torch  # noqa: F401
    import torch._dynamo
    from torch._dynamo.utils import counters
    results = {}
    for size in args.sizes:
        # Dynamo keeps its compiled entries per code object, and every side and
        # size runs the same GPT2LMHeadModel.forward: past recompile_limit (8)
        # entries it runs the frame eagerly, silently. Before this reset, the
        # second size's decode tasks ran eagerly on both compiled sides.
        torch._dynamo.reset()
        sides = {s: _side(s, size) for s in args.sides}
        for task in args.tasks:
            idx = TASKS.index(task)
            per_token = task == "kvdecode"
            compile_s, compiled = {}, {}
            run = {s: fns for s, fns in sides.items() if fns[idx] is not None}
            for s, fns in run.items():
                graphs = counters["stats"]["unique_graphs"] + _in_capture_calls()
                t0 = time.perf_counter()
                if per_token:  # the first two tokens' calls (compile, warm-up, capture)
                    compile_s[s] = sum(fns[idx]()[:2]) / 1e3
                else:
                    fns[idx]()
                    fns[idx]()  # the dk side captures its device graphs on the second call
                    fns[3]()
                    compile_s[s] = time.perf_counter() - t0
                # (dk-step: its model shares dk's compiled program; its capture
                # records the compiled graphs' calls, counted as in_capture_calls)
                compiled[s] = (s == "eager"
                               or counters["stats"]["unique_graphs"] + _in_capture_calls() > graphs)
            times = {s: [] for s in run}
            first = {s: [] for s in run}  # each block's first call
            for _ in range(args.rounds):
                for s, fns in run.items():
                    if per_token:
                        times[s] += fns[idx]()
                        continue
                    for k in range(args.block):
                        t0 = time.perf_counter()
                        fns[idx]()
                        fns[3]()
                        (times[s] if k else first[s]).append((time.perf_counter() - t0) * 1e3)
            for s in run:
                v = sorted(times[s] + first[s])
                row = {"median_ms": v[len(v) // 2], "min_ms": v[0], "max_ms": v[-1],
                       "first_two_calls_s": compile_s[s], "compiled": compiled[s]}
                if first[s] and times[s]:
                    row["after_switch_ms"] = _median(first[s])
                    row["steady_ms"] = _median(times[s])
                results[f"{size}/{task}/{s}"] = row
            if per_token:  # greedy tokens: every side must agree
                toks = {s: fns[4]["last"] for s, fns in run.items()}
                ref = next(iter(toks.values()))
                results[f"{size}/{task}/tokens_agree"] = all(t.equal(ref) for t in toks.values())
    if any(s.startswith("dk") for s in args.sides):
        import devicekit.torch as dkt
        results["dk_compile_stats"] = dkt.compile_stats()
    print(json.dumps(results))


def _in_capture_calls():
    if "devicekit.torch" not in sys.modules:
        return 0
    return sys.modules["devicekit.torch"].compile_stats().get("in_capture_calls", 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="nano,small")
    ap.add_argument("--sides", default="dk,dk-step,eager,inductor")
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--block", type=int, default=4,
                    help="calls in a row per side and round (train, decode); default 4")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.sizes, args.sides = args.sizes.split(","), args.sides.split(",")
    args.tasks = args.tasks.split(",")
    bad = [t for t in args.tasks if t not in TASKS]
    if bad:
        ap.error(f"unknown task(s) {', '.join(bad)}; tasks: {', '.join(TASKS)}")
    if args.block < 1 or args.rounds < 1:
        ap.error("--block and --rounds must be at least 1")
    if args.child:
        args.threads = int(args.threads)
        return _child(args)
    print(f"load average at start: {os.getloadavg()}")
    for n in args.threads.split(","):
        env = dict(os.environ, DEVICEKIT_CPU_THREADS=n, OMP_NUM_THREADS=n)
        cmd = [sys.executable, __file__, "--child", "--threads", n, "--rounds", str(args.rounds),
               "--block", str(args.block),
               "--sizes", ",".join(args.sizes), "--sides", ",".join(args.sides),
               "--tasks", ",".join(args.tasks)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
        if out.returncode:
            print(out.stderr[-3000:])
            raise SystemExit(f"bench_compile: the {n}-thread run failed (exit {out.returncode})")
        res = json.loads(out.stdout.strip().splitlines()[-1])
        stats = res.pop("dk_compile_stats", None)
        print(f"\n{n} thread(s); load average now {os.getloadavg()}")
        print(f"{'size/task/side':28} {'median ms':>10} {'min':>9} {'max':>9} "
              f"{'after switch':>13} {'steady':>9} {'first 2 calls s':>16}")
        for k, r in res.items():
            if k.endswith("/tokens_agree"):
                print(f"{k:28} {r}")
                continue
            split = (f"{r['after_switch_ms']:13.2f} {r['steady_ms']:9.2f}" if "steady_ms" in r
                     else f"{'':13} {'':9}")
            print(f"{k:28} {r['median_ms']:10.2f} {r['min_ms']:9.2f} {r['max_ms']:9.2f} "
                  f"{split} {r['first_two_calls_s']:16.2f}"
                  + ("" if r["compiled"] else "  ** Dynamo compiled nothing: ran eagerly **"))
        _ratios(res)
        if stats:
            print(f"devicekit compile_stats: {stats}")


def _ratios(res):
    """dk's time over eager's and inductor's, per size and task, for each
    column both have."""
    for key in res:
        size_task, _, side = key.rpartition("/")
        if side not in ("dk", "dk-step"):
            continue
        dk = res[key]
        for other in ("eager", "inductor"):
            o = res.get(f"{size_task}/{other}")
            if not o:
                continue
            cols = [c for c in ("median_ms", "after_switch_ms", "steady_ms") if c in dk and c in o]
            print(f"  {size_task}: {side} / {other} " + ", ".join(
                f"{c[:-3].replace('_', ' ')} {dk[c] / o[c]:.2f}x" for c in cols))


if __name__ == "__main__":
    main()
