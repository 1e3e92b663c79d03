"""Greedy decoding through devicekit.torch, eager against one captured decode
step replayed (``devicekit.torch.graphs``), against torch's own CPU eager.

A Hugging Face GPT2LMHeadModel (float32, dropout off, random weights scaled
so greedy tokens vary) decodes ``--tokens`` new tokens after a prompt of 8
with a ``transformers`` StaticCache. The decode step reads the token id and
the cache position from dk tensors, keeps the argmax on the device and
writes it back in place (tests/test_torch_graphs.py's ``greedy``); sides:

- ``dk eager``: the step op by op through the bridge on ``dk:0``;
- ``dk replay``: the same step captured once (``DKGraph``) and replayed;
- ``torch cpu``: the same step in torch's CPU eager.

Per round and side: the cache is reset, the prompt prefilled and the first
step run (untimed), then the remaining steps are timed up to reading the
tokens back (so the device has run them). The three sides alternate, their
order rotating each round, in one process; every round checks that the three
agree on every token. Rows: ms per new token, median [min-max] over rounds,
and the ratio to torch CPU. Then the replay's host cost: ``calls`` (device
calls one replay issues), and the calling thread's CPU time to issue K
replays (K = tokens - 2: more would write past the cache), per device
call, with the device synchronized only after them.

Sizes (``--sizes``): ``test`` (hf-gpt2's test size: 2 layers, d_model 64,
vocab 128) and ``scaled`` (4 layers, d_model 256, 8 heads, vocab 65).

Usage: python benchmarks/bench_torch_graphs.py [--sizes test,scaled]
       [--tokens 32] [--rounds 7] [--threads 1] [--mode auto|native|recorded]
"""

import argparse
import copy
import os
import statistics
import sys
import time

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--sizes", default="test,scaled")
ap.add_argument("--tokens", type=int, default=32, help="new tokens per decode")
ap.add_argument("--rounds", type=int, default=7)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--device", default="cpu:0")
ap.add_argument("--mode", default="auto", choices=("auto", "native", "recorded"),
                help="the DKGraph mode of the replay side")
args = ap.parse_args()
os.environ["DEVICEKIT_CPU_THREADS"] = str(args.threads)  # read when the plugin loads

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import StaticCache  # noqa: E402

import devicekit as dk  # noqa: E402
import devicekit.torch as dkt  # noqa: E402

torch.set_num_threads(args.threads)
transformers.logging.set_verbosity_error()
DEV = dkt.device(args.device)
SYNC = dk.device(args.device).synchronize
PROMPT = 8
SIZES = {
    "test": dict(n_layer=2, n_embd=64, n_head=4, vocab_size=128),
    "scaled": dict(n_layer=4, n_embd=256, n_head=8, vocab_size=65),
}


def build(size):
    cfg = transformers.GPT2Config(**SIZES[size], n_positions=PROMPT + args.tokens + 8,
                                  bos_token_id=0, eos_token_id=0, resid_pdrop=0.0,
                                  embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    prompt = torch.randint(0, cfg.vocab_size, (1, PROMPT), generator=gen)
    return model, prompt


class Decoder:
    """One side's static state: the cache, the token, the position, the tokens."""

    def __init__(self, model, prompt, device):
        self.m, self.device, self.prompt = model, device, prompt.to(device)
        self.cache = StaticCache(config=model.config, max_cache_len=PROMPT + args.tokens)
        self.tok = torch.zeros(1, 1, dtype=torch.long, device=device)
        self.pos = torch.zeros(1, dtype=torch.long, device=device)
        self.toks = torch.zeros(1, args.tokens, dtype=torch.long, device=device)
        self.graph = None

    def step(self):
        logits = self.m(input_ids=self.tok, cache=self.cache, cache_position=self.pos,
                        use_cache=True).logits
        self.tok.copy_(logits[:, -1:].argmax(-1))
        self.toks.index_copy_(1, self.pos - (PROMPT - 1), self.tok)
        self.pos.add_(1)

    def start(self):
        """Reset, prefill, first step (eager): the untimed part of a round."""
        self.cache.reset()
        out = self.m(input_ids=self.prompt, cache=self.cache, use_cache=True,
                     cache_position=torch.arange(PROMPT, device=self.device))
        self.tok.copy_(out.logits[:, -1:].argmax(-1))
        self.toks[:, :1].copy_(self.tok)
        self.pos.fill_(PROMPT)
        self.step()

    def capture(self):
        self.graph = dkt.DKGraph(args.mode)
        with dkt.graph(self.graph, self.device):
            self.step()

    def rest(self):
        run = self.graph.replay if self.graph is not None else self.step
        for _ in range(args.tokens - 2):
            run()
        return self.toks.cpu()  # (reads back: the device has run everything)


def bench(size):
    model, prompt = build(size)
    with torch.no_grad():
        sides = {"dk eager": Decoder(copy.deepcopy(model).to(DEV), prompt, DEV),
                 "torch cpu": Decoder(model, prompt, "cpu")}
        replay = Decoder(sides["dk eager"].m, prompt, DEV)
        replay.start()
        replay.capture()  # (the capture runs nothing: start() again per round)
        sides["dk replay"] = replay
        names = list(sides)
        times = {n: [] for n in names}
        for r in range(args.rounds + 1):  # round 0 warms up, untimed
            order = names[r % 3:] + names[:r % 3]
            toks = {}
            for n in order:
                d = sides[n]
                d.start()
                SYNC()
                t0 = time.perf_counter()
                toks[n] = d.rest()
                if r:
                    times[n].append((time.perf_counter() - t0) / (args.tokens - 2))
            same = all(torch.equal(toks[n], toks["torch cpu"]) for n in names)
            if not same:
                sys.exit(f"{size}: the sides disagree on the tokens: {toks}")
        cpu_med = statistics.median(times["torch cpu"])
        print(f"\n{size} ({SIZES[size]}), {args.tokens} new tokens, batch 1, threads "
              f"{args.threads}: ms per token, median [min-max] of {args.rounds}; tokens agree")
        for n in names:
            t = times[n]
            med = statistics.median(t)
            print(f"  {n:10s} {med * 1e3:8.3f} [{min(t) * 1e3:.3f}-{max(t) * 1e3:.3f}]"
                  f"   x{med / cpu_med:.2f} of torch cpu")
        # host cost of a replay: issue K replays, then synchronize
        g, k = replay.graph, args.tokens - 2  # (more would write past the cache)
        replay.start()
        SYNC()
        c0, t0 = time.thread_time(), time.perf_counter()
        for _ in range(k):
            g.replay()
        c1, t1 = time.thread_time(), time.perf_counter()
        SYNC()
        print(f"  replay: {g.calls} device calls ({g.mode}); issuing {k} replays: "
              f"{(c1 - c0) / k * 1e6:.1f} us CPU ({(t1 - t0) / k * 1e6:.1f} us wall) per replay,"
              f" {(c1 - c0) / (k * g.calls) * 1e9:.0f} ns per call; eager dk per call "
              f"(whole step / calls): {statistics.median(times['dk eager']) / g.calls * 1e6:.2f} us")


print(f"devicekit {dk.__version__}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}, device {args.device}, load {os.getloadavg()[0]:.2f}")
for s in args.sizes.split(","):
    bench(s)
print(f"load after: {os.getloadavg()[0]:.2f}")
