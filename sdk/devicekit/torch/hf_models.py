"""Small Hugging Face ``transformers`` models with random weights (no
download), and one training step of each, for coverage runs and tests.

``build(name, seed)`` gives the model on the CPU (the same weights for every
device: build once, copy to each device) and a batch; ``train_step`` runs
forward, the model's own loss, backward and ``torch.optim.AdamW.step``.
"""

import torch

# model type -> (config class name, model class name, small config)
SMALL = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel",
             dict(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64,
                  bos_token_id=0, eos_token_id=0)),
    "llama": ("LlamaConfig", "LlamaForCausalLM",
              dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                   num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                   max_position_embeddings=64, bos_token_id=0, eos_token_id=0, pad_token_id=0)),
    "bert": ("BertConfig", "BertForMaskedLM",
             dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                  num_attention_heads=4, vocab_size=128, max_position_embeddings=64)),
    "vit": ("ViTConfig", "ViTForImageClassification",
            dict(image_size=16, patch_size=4, num_channels=3, hidden_size=64,
                 num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                 num_labels=5)),
}
VOCAB, BATCH, LENGTH = 128, 2, 16


def names():
    return sorted(SMALL)


def build(name, seed=0, dropout=True):
    """(model, batch) on the CPU, the batch a dict of the model's inputs and
    labels (token ids as their own labels; for vit, images and classes).
    ``dropout=False`` zeroes the configs' dropout probabilities (a run
    comparable across devices draws no random numbers in the step)."""
    import transformers
    if name not in SMALL:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(names())}")
    config_cls, model_cls, kwargs = SMALL[name]
    kwargs = dict(kwargs)
    if not dropout:
        for key in ("resid_pdrop", "embd_pdrop", "attn_pdrop", "hidden_dropout_prob",
                    "attention_probs_dropout_prob", "attention_dropout"):
            kwargs[key] = 0.0
    torch.manual_seed(seed)
    config = getattr(transformers, config_cls)(**kwargs)
    model = getattr(transformers, model_cls)(config)
    gen = torch.Generator().manual_seed(seed)
    if name == "vit":
        batch = {"pixel_values": torch.randn(BATCH, 3, 16, 16, generator=gen),
                 "labels": torch.randint(0, 5, (BATCH,), generator=gen)}
    else:
        ids = torch.randint(0, VOCAB, (BATCH, LENGTH), generator=gen)
        batch = {"input_ids": ids, "labels": ids}
    return model, batch


def train_step(model, batch, optimizer):
    """One step: forward with the model's own loss, backward,
    ``optimizer.step()``; returns the loss as a float."""
    loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


def run_steps(name, device, steps=1, foreach=None, seed=0, dropout=True):
    """The losses of ``steps`` AdamW training steps of model ``name`` on ``device``."""
    model, batch = build(name, seed, dropout)
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=foreach)
    batch = {k: v.to(device) for k, v in batch.items()}
    return [train_step(model, batch, opt) for _ in range(steps)]
