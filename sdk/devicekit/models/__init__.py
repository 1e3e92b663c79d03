"""The model zoo and the model-regression harness (docs/models.md).

Every model is written only with ``devicekit.nn.functional`` and
``devicekit.ops``, so it runs on any plugin implementing the base set; it has
a config, Philox-seeded weights and data (identical bits on every backend) and
named layer boundaries (:class:`~devicekit.models.base.Layer`)::

    import devicekit.models as zoo
    model = zoo.get("llama")
    [layer.name for layer in model.layers()]    # ['embed', 'block0.attn', ...]

``devicekit models --device NAME`` runs the regression protocol
(``devicekit.models.harness``) against every model: the zoo (``NAMES``) and
the multi-rank cases (``MULTI_RANK_NAMES``: ``gpt2-ddp2``, ``devicekit.models.ddp``)
and the Hugging Face ``transformers`` models run through ``devicekit.torch``
(``HF_NAMES``, ``devicekit.models.hf``); ``ALL_NAMES`` is all three, in report order.
"""

from . import hf
from .base import Layer, Model
from .ddp import DDPModel
from .transformers import (GPT2, Encoder, EncoderConfig, GPT2Config, Llama, LlamaConfig, ViT,
                           ViTConfig)
from .vision import CNN, MLP, CNNConfig, MLPConfig

# name -> a model at its default config, in the order reports list them
ZOO = {"mlp": lambda: MLP(MLPConfig()), "cnn": lambda: CNN(CNNConfig()),
       "gpt2": lambda: GPT2(GPT2Config()), "llama": lambda: Llama(LlamaConfig()),
       "encoder": lambda: Encoder(EncoderConfig()), "vit": lambda: ViT(ViTConfig())}
NAMES = tuple(ZOO)
# multi-rank cases: a zoo model trained data-parallel (models.ddp)
MULTI_RANK = {"gpt2-ddp2": lambda: DDPModel(ZOO["gpt2"](), 2)}
MULTI_RANK_NAMES = tuple(MULTI_RANK)
HF_NAMES = hf.NAMES  # torch + transformers models: hf-gpt2 ... hf-clip (hf.SPECS)
ALL_NAMES = NAMES + MULTI_RANK_NAMES + HF_NAMES


def get(name):
    """The model ``name`` at its default config: a zoo ``Model``, or an
    ``hf.HFModel`` for the ``hf-*`` names (built without importing torch)."""
    from ..errors import InvalidArgumentError

    if name in HF_NAMES:
        return hf.get(name)
    if name in MULTI_RANK:
        return MULTI_RANK[name]()
    if name not in ZOO:
        raise InvalidArgumentError(f"unknown model {name!r}; the models are: "
                                   f"{', '.join(ALL_NAMES)}")
    return ZOO[name]()


__all__ = ["ALL_NAMES", "CNN", "CNNConfig", "DDPModel", "Encoder", "EncoderConfig", "GPT2", "GPT2Config",
           "HF_NAMES", "Layer", "Llama", "LlamaConfig", "MLP", "MLPConfig", "MULTI_RANK_NAMES",
           "Model", "NAMES", "ViT",
           "ViTConfig", "ZOO", "get"]
