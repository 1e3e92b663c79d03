"""devicekit.torch: the ``torch.distributed`` backend ``dk`` with two and three ranks.

One fixture spawns three rank processes for every test (this file run as a
script: ``RANK``, ``MASTER_ADDR``, ``MASTER_PORT`` on a free port, torch's
TCPStore), each on its own ``dk:0`` (the reference CPU plugin's cpu:0), with a
timeout, and kills every child in a ``finally``; the ranks run the parts in
turn, in a new process group each: first all three ranks, then ranks 0 and 1
(rank 2 has left). Checked: each collective on ``dk`` tensors equals gloo's on
CPU copies in one ``"cpu:gloo,dk:dk"`` group; unsupported forms raise a
DeviceKit error naming them; DDP trains a tiny Hugging Face GPT-2 and a tiny
Llama on three and on two ranks, and FSDP2 (``fully_shard``) the GPT-2 on two,
each to the losses and weights of one process on the whole batch (every rank
gets an equal slice of one six-row batch), and a CPU tensor in that ``"dk"``
group is refused; a rank that dies makes the other's collective fail within
the group timeout. Needs torch, transformers and a plugin with the
collectives part (skipped with the reason otherwise).
"""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch", reason="devicekit.torch needs torch: pip install "
                                            "'devicekit[torch]'")

ROOT = os.path.dirname(os.path.abspath(__file__))
WORLD = 2  # the collectives, the two-rank training and the dead rank
PROCS = 3  # processes spawned: the three-rank training runs first, on all of them
BATCH = 6  # rows of the one batch: an equal slice per rank for 2 and 3 ranks
TIMEOUT = 150  # seconds the ranks may take before the test kills them
# float32 end to end: DDP averages per-rank gradients where the single run
# reduces the whole batch at once, so sums run in a different order; the
# model suite's float32 bound on losses (tests/test_torch_models.py) applies.
ATOL = 5e-5
STEPS = 3
DEAD_TIMEOUT = 8  # seconds: the group timeout of the part where rank 1 dies


# ---- the rank side (this file run as a script) ------------------------------------------

def _gpt2(seed=0):
    import transformers
    transformers.logging.set_verbosity_error()
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32, bos_token_id=0,
        eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 64, (BATCH, 12), generator=torch.Generator().manual_seed(seed))
    return model, ids


def _llama(seed=0):
    import transformers
    transformers.logging.set_verbosity_error()
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=64, max_position_embeddings=32, bos_token_id=0,
        eos_token_id=0, pad_token_id=0)
    model = transformers.LlamaForCausalLM(config)
    ids = torch.randint(0, 64, (BATCH, 12), generator=torch.Generator().manual_seed(seed + 1))
    return model, ids


MODELS = {"gpt2": _gpt2, "llama": _llama}


def _train(model, ids, steps=STEPS):
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for _ in range(steps):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def _init(store, round_, backend, timeout, world=WORLD):
    import datetime
    import torch.distributed as dist
    dist.init_process_group(backend, store=dist.PrefixStore(f"round{round_}", store),
                            rank=int(os.environ["RANK"]), world_size=world,
                            timeout=datetime.timedelta(seconds=timeout))


def _collectives(rank):
    """Each collective on dk tensors and on CPU copies (gloo) in one
    "cpu:gloo,dk:dk" group: both results, as lists."""
    import torch.distributed as dist
    import devicekit

    gen = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(3, 5, generator=gen)
    got = {}

    def both(name, fn, *tensors):
        dk = [t.to("dk:0") for t in tensors]
        cpu = [t.clone() for t in tensors]
        fn(*dk)
        fn(*cpu)
        got[name] = ([t.cpu().tolist() for t in dk], [t.tolist() for t in cpu])

    R = dist.ReduceOp
    for op in (R.SUM, R.PRODUCT, R.MIN, R.MAX):
        both(f"all_reduce {op}", lambda t, op=op: dist.all_reduce(t, op=op), x)
    both("all_reduce int64", lambda t: dist.all_reduce(t), torch.arange(7) * (rank + 1))
    d, c = x.to("dk:0"), x.clone()  # gloo has no AVG: its side is SUM / world
    dist.all_reduce(d, op=R.AVG)
    dist.all_reduce(c)
    got["all_reduce AVG"] = ([d.cpu().tolist()], [(c / WORLD).tolist()])
    both("broadcast root 1", lambda t: dist.broadcast(t, src=1), x)
    both("all_gather_into_tensor", lambda o, t: dist.all_gather_into_tensor(o, t),
         torch.zeros(WORLD * 3, 5), x)
    both("reduce_scatter_tensor", lambda o, t: dist.reduce_scatter_tensor(o, t),
         torch.zeros(2, 5), torch.randn(WORLD * 2, 5, generator=gen))
    both("all_to_all_single", lambda o, t: dist.all_to_all_single(o, t),
         torch.zeros(4, 3), torch.randn(4, 3, generator=gen))
    col, x0 = x.to("dk:0"), torch.randn(3, 5, generator=torch.Generator().manual_seed(100))
    dist.broadcast(col[:, 1], src=0)  # a view that is not contiguous: written through
    expect = x.clone()
    expect[:, 1] = x0[:, 1]
    got["broadcast into a column"] = ([col.cpu().tolist()], [expect.tolist()])
    d_list = [torch.zeros(3, 5, device="dk:0") for _ in range(WORLD)]
    c_list = [torch.zeros(3, 5) for _ in range(WORLD)]
    dist.all_gather(d_list, x.to("dk:0"))
    dist.all_gather(c_list, x)
    got["all_gather list"] = ([t.cpu().tolist() for t in d_list], [t.tolist() for t in c_list])
    buf = torch.zeros(3, 5, device="dk:0")  # rank 0 sends its x to rank 1
    if rank == 0:
        dist.send(x.to("dk:0"), dst=1)
        got["send/recv"] = ([[0.0]], [[0.0]])
    else:
        dist.recv(buf, src=0)
        sent = torch.randn(3, 5, generator=torch.Generator().manual_seed(100))
        got["send/recv"] = ([buf.cpu().tolist()], [sent.tolist()])
    dist.barrier()
    errors = {}
    for name, fn in (
            ("unequal splits", lambda: dist.all_to_all_single(
                torch.zeros(4, device="dk:0"), torch.zeros(4, device="dk:0"),
                output_split_sizes=[1, 3], input_split_sizes=[3, 1])),
            ("gather", lambda: dist.gather(torch.zeros(2, device="dk:0"),
                                           [torch.zeros(2, device="dk:0")] * WORLD if rank == 0
                                           else None, dst=0))):
        try:
            fn()
            errors[name] = None
        except Exception as e:  # the test checks its type and message
            errors[name] = [type(e).__name__, str(e), isinstance(e, devicekit.DeviceKitError)]
    dist.barrier()
    return {"got": got, "errors": errors}


def _slice(ids, rank, world):
    n = BATCH // world
    return ids[rank * n:(rank + 1) * n]


def _weights(model):
    return {k: v.cpu().tolist() for k, v in model.state_dict().items()
            if k.endswith(("c_attn.weight", "wte.weight", "ln_f.bias", "q_proj.weight",
                           "embed_tokens.weight", "norm.weight"))}


def _ddp(rank, world, name):
    """A tiny model under DDP on this rank's slice of the batch: losses, some weights."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    model, ids = MODELS[name]()
    model = DDP(model.to("dk:0"))
    losses = _train(model, _slice(ids, rank, world).to("dk:0"))
    return {"losses": losses, "weights": _weights(model.module)}


def _fsdp(rank, world, name):
    """The tiny model under FSDP2 (each block, then the root, fully_shard'ed)
    on this rank's slice: losses, this rank's shards of some weights (dim-0
    chunks, as ``Shard(0)`` lays them out), and those weights gathered in
    full (``DTensor.full_tensor``: the functional all-gather)."""
    from torch.distributed.fsdp import fully_shard

    model, ids = MODELS[name]()
    model = model.to("dk:0")
    blocks = model.transformer.h if name == "gpt2" else model.model.layers
    for block in blocks:
        fully_shard(block)
    fully_shard(model)
    losses = _train(model, _slice(ids, rank, world).to("dk:0"))
    state = {k: v for k, v in model.state_dict().items()
             if k.endswith(("c_attn.weight", "wte.weight", "ln_f.bias", "q_proj.weight",
                            "embed_tokens.weight", "norm.weight"))}
    shards = {k: v.to_local().cpu().tolist() for k, v in state.items()}
    weights = {k: v.full_tensor().cpu().tolist() for k, v in state.items()}
    sharded = type(model.transformer.wte.weight).__name__ if name == "gpt2" else None
    return {"losses": losses, "shards": shards, "weights": weights, "param_type": sharded}


def _cpu_refused():
    try:  # a "dk" group has no CPU backend: refused, never run
        torch.distributed.all_reduce(torch.ones(2))
        return None
    except Exception as e:
        return f"{type(e).__name__}: {e}"


def _rank(rank, out):
    """Every case, one after the other, in one process per rank (torch,
    transformers and the plugin load once): DDP on three ranks in a "dk"
    group, after which rank 2 leaves; then on ranks 0 and 1 the collectives
    in a "cpu:gloo,dk:dk" group, DDP and FSDP2 in a "dk" group, then rank 1
    dies in a last group and rank 0 reports how its next all_reduce ended.
    Each part's result is written as it comes, so a failure names the part."""
    import torch.distributed as dist
    import devicekit.torch  # noqa: F401  (registers the dk device and backend)

    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), PROCS,
                          rank == 0, timeout=__import__("datetime").timedelta(seconds=60))
    results = {}

    def save():
        with open(out, "w") as f:
            json.dump(results, f)

    def part(key, fn, *args):
        start = time.monotonic()
        try:
            results[key] = fn(*args)
            results[key]["seconds"] = time.monotonic() - start
        except Exception as e:  # named in the test's failure; the other parts go on
            import traceback
            results[key] = {"error": f"{type(e).__name__}: {e}",
                            "traceback": traceback.format_exc()[-3000:]}
        save()

    _init(store, "ddp3", "dk", 60, world=PROCS)
    for name in MODELS:
        part(f"ddp3 {name}", _ddp, rank, PROCS, name)
    dist.destroy_process_group()
    if rank >= WORLD:
        os._exit(0)
    _init(store, 0, "cpu:gloo,dk:dk", 60)
    start = time.monotonic()
    results["collectives"] = _collectives(rank)
    results["collectives seconds"] = time.monotonic() - start
    save()
    dist.destroy_process_group()
    _init(store, 1, "dk", 60)
    for name in MODELS:
        part(f"ddp2 {name}", _ddp, rank, WORLD, name)
    part("fsdp2 gpt2", _fsdp, rank, WORLD, "gpt2")
    results["cpu_refused"] = _cpu_refused()
    save()
    dist.destroy_process_group()
    _init(store, 2, "dk", DEAD_TIMEOUT)
    t = torch.ones(4, device="dk:0")
    dist.all_reduce(t)  # the group works before the peer goes
    if rank == 1:
        os._exit(7)  # dies without a word
    start = time.monotonic()
    try:
        dist.all_reduce(t)
        results["dies"] = {"error": None}
    except Exception as e:
        results["dies"] = {"error": f"{type(e).__name__}: {e}"}
    results["dies"]["seconds"] = time.monotonic() - start
    save()
    os._exit(0)  # no destroy: the peer is gone


# ---- the test side --------------------------------------------------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Runs ``_rank`` on PROCS processes and, meanwhile, the single-process
    reference runs here (each model on the whole batch); returns (each rank's
    results, return codes, output, {model: (losses, weights)})."""
    _needs_collectives()
    pytest.importorskip("transformers", reason="DDP trains transformers models: "
                                               "pip install transformers")
    tmp = tmp_path_factory.mktemp("ranks")
    port = _free_port()
    procs, outs = [], []
    try:
        for rank in range(PROCS):
            outs.append(tmp / f"rank{rank}.json")
            env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            procs.append(subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), str(outs[-1])],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        deadline = time.monotonic() + TIMEOUT
        refs = {}
        for name, make in MODELS.items():  # the reference: one process, the whole batch
            model, ids = make()
            model = model.to("dk:0")
            refs[name] = (_train(model, ids.to("dk:0")),
                          {k: v.cpu() for k, v in model.state_dict().items()})
        texts = [p.communicate(timeout=max(1, deadline - time.monotonic()))[0] for p in procs]
        codes = [p.returncode for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    results = [json.loads(o.read_text()) if o.exists() else {} for o in outs]
    return results, codes, "\n".join(texts), refs


def _needs_collectives():
    import devicekit.torch as dkt
    from devicekit import distributed
    dev = dkt.dk_device("dk:0")
    if not distributed.is_available(dev):
        pytest.skip(f"{dev.name}'s plugin has no collectives part")


def test_collectives_equal_gloo(ranks):
    results, codes, text, _ = ranks
    for rank, res in enumerate(results[:WORLD]):
        assert "collectives" in res, f"rank {rank} did not finish the collectives:\n{text}"
        for name, (dk, cpu) in res["collectives"]["got"].items():
            assert len(dk) == len(cpu), (rank, name)
            for d, c in zip(dk, cpu):
                a, b = torch.tensor(d, dtype=torch.float64), torch.tensor(c, dtype=torch.float64)
                assert a.shape == b.shape and torch.allclose(a, b, rtol=1.3e-6, atol=1e-5), (
                    f"rank {rank} {name}: dk {d} vs gloo {c}")
        for name in ("unequal splits", "gather"):
            err = res["collectives"]["errors"][name]
            assert err is not None, f"rank {rank}: {name} did not raise"
            kind, message, is_devicekit = err
            assert is_devicekit and name in message and "'dk'" in message, (rank, kind, message)


def _check_equals_one_process(ranks, key, world):
    """The ranks' ``key`` part against the reference on the whole batch: the
    mean of the ranks' losses (each the mean over an equal slice) at every
    step, and every rank's weights after the last."""
    results, codes, text, refs = ranks
    ref_losses, ref_weights = refs[key.split()[-1]]
    runs = [r.get(key) for r in results[:world]]
    assert all(runs), f"{key} did not finish:\n{text}"
    for rank, res in enumerate(runs):
        assert "error" not in res, f"rank {rank} {key}: {res['error']}\n{res['traceback']}"
    assert ref_losses[-1] < ref_losses[0]
    for step in range(STEPS):
        mean = sum(r["losses"][step] for r in runs) / world
        assert abs(mean - ref_losses[step]) <= ATOL, (key, step, mean, ref_losses, runs)
    for rank, res in enumerate(runs):
        if "shards" in res:  # FSDP2: each rank holds its dim-0 chunk of every weight
            assert res["shards"], "no shards came back"
            for k, w in res["shards"].items():
                chunk = ref_weights[k].chunk(world, dim=0)[rank]
                assert torch.tensor(w).shape == chunk.shape, (rank, k, chunk.shape)
                diff = (torch.tensor(w) - chunk).abs().max().item()
                assert diff <= ATOL, f"rank {rank} {k}: max abs difference {diff} after {key}"
        assert res["weights"], "no weights came back"
        for k, w in res["weights"].items():
            assert torch.tensor(w).shape == ref_weights[k].shape, (rank, k)
            diff = (torch.tensor(w) - ref_weights[k]).abs().max().item()
            assert diff <= ATOL, f"rank {rank} {k}: max abs difference {diff} after {key}"
    assert all(r["weights"] == runs[0]["weights"] for r in runs), (
        f"{key}: the ranks' weights differ")
    return runs


@pytest.mark.parametrize("key,world", [("ddp2 gpt2", 2), ("ddp3 gpt2", 3), ("ddp2 llama", 2),
                                       ("ddp3 llama", 3)])
def test_ddp_equals_one_process_on_the_whole_batch(ranks, key, world):
    _check_equals_one_process(ranks, key, world)


def test_fsdp2_gpt2_equals_one_process_on_the_whole_batch(ranks):
    runs = _check_equals_one_process(ranks, "fsdp2 gpt2", WORLD)
    assert runs[0]["param_type"] == "DTensor", runs[0]["param_type"]  # sharded, not replicated


def test_cpu_tensor_refused_in_a_dk_group(ranks):
    results = ranks[0]
    for res in results[:WORLD]:
        refused = res.get("cpu_refused")
        assert refused and "cpu:gloo,dk:dk" in refused, refused


def test_dead_rank_fails_the_other_within_the_timeout(ranks):
    results, codes, text, _ = ranks
    assert codes[1] == 7, f"rank 1 should have died at its os._exit(7):\n{text}"
    assert codes[0] == 0 and "dies" in results[0], text
    dies = results[0]["dies"]
    assert dies["error"], f"rank 0's all_reduce returned with its peer dead: {dies}"
    assert "all_reduce" in dies["error"] and "1" in dies["error"], dies
    assert dies["seconds"] < DEAD_TIMEOUT + 10, dies


if __name__ == "__main__":
    _rank(int(os.environ["RANK"]), sys.argv[1])
