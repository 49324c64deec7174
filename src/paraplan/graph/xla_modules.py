"""MaxText's variants of the embedding, the LM head GEMM and the input projections (issue 33): module_impl
roles ``embedding``, ``logits`` and ``projections`` (specs.system.MODULE_IMPLS), which a framework profile or a
case's recipe states.

- ``embedding: one-hot-gemm``: MaxText's ``use_iota_embed`` (default False, every GPU recipe of the validation
  cases sets it true). google/maxtext MaxText/layers/embeddings.py Embed.__call__, unchanged from efb6d9e
  (2024-04-09) to 00d800c3 (2025): ``one_hot = jnp.array(inputs[..., None] == lax.iota(int32, V),
  dtype=self.dtype)``, ``output = jnp.dot(one_hot, jnp.asarray(self.embedding, self.dtype))``: the lookup is a
  GEMM of the tokens × the vocabulary × the hidden width in the compute dtype (bf16; ``jnp.dot``, not a quantised
  DenseGeneral, so bf16 in fp8 runs too). Its backward is the table's gradient alone, one_hotᵀ·dY: the one-hot
  of integer ids has no gradient.
- ``logits: fp32-dot``: MaxText's ``logits_dot_in_fp32`` (base.yml default True from 0fee3204, 2024-01-13, to
  49b84a74, 2024-10-03, False after): MaxText/layers/models.py at efb6d9e, the logits DenseGeneral with
  ``dtype=jnp.float32`` casts its input and kernel to fp32 and calls ``lax.dot_general(..., precision=None)``
  (MaxText/layers/linears.py): an fp32 dot at JAX's default precision, which runs on TF32 tensor cores on
  A100 / H100 (JAX documentation "Matmul precision": "float32 dot products may be computed with
  reduced-precision arithmetic internally (bfloat16 on TPU, TF32 on recent GPUs)"; jax-ml/jax issue 18934:
  "jax.lax.Precision.DEFAULT with FP32 inputs does matmul in FP32 on V100, TF32 on A100/H100"). The forward
  GEMM and both backward GEMMs run at the TF32 rate.
- ``projections: separate``: MaxText's ``fused_qkv`` and ``fused_mlp`` (base.yml:97-98 at efb6d9e, both False;
  the llama model configs leave them): MaxText/layers/attentions.py Attention.__call__ runs query_projection
  and kv_projection (key, value) as three DenseGenerals (checkpoint names 'query_proj', 'key_proj',
  'value_proj'), and MaxText/layers/linears.py MlpBlock one DenseGeneral per activation ('wi_0', 'wi_1' for
  SwiGLU): the q, k, v and gate, up GEMMs run apart, each at its own shape's rate
  (graph.ops.separate_projections).
"""

from __future__ import annotations

from paraplan.graph.ops import Op
from paraplan.specs.system import LOW_PRECISION

ONE_HOT_GEMM = ("embedding", "one-hot-gemm")
SEPARATE_PROJECTIONS = ("projections", "separate")
FP32_LOGITS = ("logits", "fp32-dot")


def one_hot_embedding_op(tokens: int, vocab_local: float, hidden: int, dtype: str) -> Op:
    """The embedding lookup as MaxText's one-hot GEMM (module docstring): Y[tokens, h] = one_hot[tokens,
    V/t]·E[V/t, h] (the table's vocab-parallel rows on this GPU), 2·tokens·(V/t)·h FLOPs forward; backward
    dW = one_hotᵀ·dY alone, as many FLOPs (``Op.input_grad`` False). The GEMM runs in bf16 under an fp8 or FP4
    recipe (``Op.dtype``), in the plan's dtype otherwise. Named ``embedding_lookup`` as the gather it replaces
    (the name-keyed terms: cost.host, cost.graph_scope)."""
    flops = 2.0 * tokens * vocab_local * hidden
    return Op(
        "embedding_lookup",
        "gemm",
        flops,
        0.0,
        flops,
        0.0,
        (1, int(tokens), int(hidden), int(vocab_local)),
        dtype="bf16" if dtype in LOW_PRECISION else None,
        input_grad=False,
    )


def fp32_logits_op(op: Op) -> Op:
    """The LM head GEMM ``op`` as MaxText's fp32 logits dot (module docstring): the same shape and FLOPs,
    forward and both backward GEMMs at the TF32 rate (``Op.dtype`` "tf32")."""
    return op._replace(dtype="tf32")
