"""The transformer being trained, described by its shape (MISSION.md, "Inputs")."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator


class ModelSpec(BaseModel):
    """A dense decoder-only transformer.

    ``bias``, ``dropout`` and ``position_embedding`` default from the MLP type: GPT-style (gelu)
    models have biases, dropout 0.1 and learned absolute positions (Radford et al. 2019; Brown et
    al. 2020; Megatron-LM defaults), Llama-style (swiglu) models have none of them and use rotary
    positions (Touvron et al. 2023).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "custom"
    source: str = ""
    layers: int = Field(gt=0, description="number of transformer layers")
    hidden: int = Field(gt=0, description="model (residual stream) width h")
    heads: int = Field(gt=0, description="query heads a")
    kv_heads: int | None = Field(default=None, gt=0, description="key/value heads (GQA/MQA); default = heads")
    head_dim: int | None = Field(default=None, gt=0, description="per-head width; default hidden / heads")
    ffn_hidden: int = Field(gt=0, description="MLP inner width")
    vocab: int = Field(gt=0, description="vocabulary size")
    mlp: Literal["gelu", "swiglu"] = "gelu"
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    tie_embeddings: bool = False
    bias: bool | None = None
    dropout: bool | None = Field(default=None, description="hidden/attention dropout on; default: gelu models yes")
    position_embedding: Literal["learned", "rope"] | None = None
    max_position: int = Field(default=2048, gt=0, description="rows of a learned position table")
    # ---- mixture-of-experts, MLA, MTP (issue 9; rules and derived shape in specs/moe_model.py) ----
    experts: int = Field(0, ge=0, description="routed experts per MoE layer; 0 = dense model")
    top_k: int = Field(0, ge=0, description="routed experts each token is sent to (1 <= top_k <= experts)")
    moe_ffn_hidden: int | None = Field(None, gt=0, description="inner width of one routed expert")
    shared_experts: int = Field(0, ge=0, description="experts every token passes through (DeepSeekMoE)")
    shared_ffn_hidden: int | None = Field(
        None, gt=0, description="total inner width of the shared expert(s); default shared_experts·moe_ffn_hidden"
    )
    dense_layers: int = Field(0, ge=0, description="leading dense layers (MLP width ffn_hidden) before the MoE layers")
    moe_layer_interval: int = Field(1, gt=0, description="after the dense layers, every n-th layer is MoE (1 = all)")
    attention_type: Literal["gqa", "mla"] = Field("gqa", description="gqa (MHA/GQA/MQA) or mla (DeepSeek-V2 latent attention)")
    q_lora_rank: int | None = Field(None, gt=0, description="MLA query compression rank; null = no query compression")
    kv_lora_rank: int | None = Field(None, gt=0, description="MLA joint key/value compression rank d_c")
    qk_nope_head_dim: int | None = Field(None, gt=0, description="MLA per-head query/key width without rotary")
    qk_rope_head_dim: int | None = Field(None, gt=0, description="MLA per-head decoupled rotary query/key width")
    v_head_dim: int | None = Field(None, gt=0, description="MLA per-head value width")
    mtp_layers: int = Field(0, ge=0, description="multi-token-prediction modules (DeepSeek-V3 §2.2)")
    sliding_window: int | None = Field(None, gt=0, description="attention window in tokens of windowed layers")
    sliding_window_pattern: int = Field(
        0, ge=0, description="0: every layer windowed; n: every n-th layer full, the others windowed"
    )
    # ---- end of the MoE block -------------------------------------------------------------
    _hash: int = PrivateAttr(0)

    def model_post_init(self, __context) -> None:
        self._hash = hash(tuple(self.__dict__.values()))

    def __hash__(self) -> int:  # computed once: the op-graph caches key on the model
        return self.__pydantic_private__["_hash"]

    @model_validator(mode="after")
    def _check_shape(self) -> "ModelSpec":
        kv = self.kv_heads if self.kv_heads is not None else self.heads
        if self.heads % kv != 0:
            raise ValueError(f"kv_heads={kv} must divide heads={self.heads}")
        if self.head_dim is None and self.hidden % self.heads != 0:
            raise ValueError(f"hidden={self.hidden} is not divisible by heads={self.heads}; give head_dim")
        from paraplan.specs.moe_model import moe_model_problems

        problems = moe_model_problems(self)
        if problems:
            raise ValueError(problems[0])
        return self

    # ---- derived shape -------------------------------------------------------------------
    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def d_head(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden // self.heads

    @property
    def q_width(self) -> int:
        """Width of the concatenated query heads, a·d_head."""
        return self.heads * self.d_head

    @property
    def kv_width(self) -> int:
        """Width of the concatenated key (or value) heads, a_kv·d_head."""
        return self.n_kv_heads * self.d_head

    @property
    def has_bias(self) -> bool:
        return self.bias if self.bias is not None else self.mlp == "gelu"

    @property
    def has_dropout(self) -> bool:
        return self.dropout if self.dropout is not None else self.mlp == "gelu"

    @property
    def learned_positions(self) -> bool:
        pos = self.position_embedding or ("learned" if self.mlp == "gelu" else "rope")
        return pos == "learned"

    @property
    def mlp_input_projections(self) -> int:
        """1 for gelu (W1), 2 for swiglu (gate and up)."""
        return 2 if self.mlp == "swiglu" else 1

    # ---- mixture-of-experts / MLA derived shape (issue 9; formulas in specs/moe_model.py) ----
    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.attention_type == "mla"

    @property
    def moe_layers(self) -> tuple[int, ...]:
        """0-based indices of the MoE layers."""
        from paraplan.specs.moe_model import is_moe_layer

        return tuple(i for i in range(self.layers) if is_moe_layer(self, i))

    @property
    def total_params(self) -> int:
        """Every parameter (MTP modules included); the memory of the model."""
        from paraplan.specs.moe_model import total_params

        return total_params(self)

    @property
    def active_params(self) -> int:
        """Parameters one token passes through (top_k of the routed experts); the FLOPs of the model."""
        from paraplan.specs.moe_model import total_params

        return total_params(self, active=True)
