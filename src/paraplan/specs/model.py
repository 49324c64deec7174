"""The transformer being trained, described by its shape (MISSION.md, "Inputs")."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PrivateAttr, model_validator

from paraplan.specs.choices import Activation
from paraplan.specs.strict import InputModel

RouterBalancing = Literal["aux_loss", "seq_aux_loss", "global_aux_loss", "aux_free", "none"]


class LayerWidth(InputModel):
    """``count`` consecutive transformer layers whose widths differ from the model's (unset = the model's)."""

    count: int = Field(gt=0)
    hidden: int | None = Field(default=None, gt=0)
    heads: int | None = Field(default=None, gt=0)
    kv_heads: int | None = Field(default=None, gt=0)
    head_dim: int | None = Field(default=None, gt=0)
    ffn_hidden: int | None = Field(default=None, gt=0)


class ModelSpec(InputModel):
    """A dense decoder-only transformer.

    ``bias``, ``dropout`` and ``position_embedding`` default from the MLP type: GPT-style (gelu)
    models have biases, dropout 0.1 and learned absolute positions (Radford et al. 2019; Brown et
    al. 2020; Megatron-LM defaults), Llama-style (swiglu) models have none of them and use rotary
    positions (Touvron et al. 2023).
    """

    name: str = "custom"
    source: str = ""
    layers: int = Field(gt=0, description="number of transformer layers")
    hidden: int = Field(gt=0, description="model (residual stream) width h")
    heads: int = Field(gt=0, description="query heads a")
    kv_heads: int | None = Field(
        default=None, gt=0, description="key/value heads (GQA/MQA); default = heads"
    )
    head_dim: int | None = Field(
        default=None, gt=0, description="per-head width; default hidden / heads"
    )
    qk_norm: bool = Field(
        default=False,
        description="RMSNorm over each query and key head before RoPE (Qwen3, Gemma 3): "
        "2 x head_dim weights a layer",
    )
    ffn_hidden: int = Field(gt=0, description="MLP inner width")
    vocab: int = Field(gt=0, description="vocabulary size")
    mlp: Literal["gelu", "swiglu"] = "gelu"
    activation: Activation | None = Field(
        default=None,
        description="the MLP activation by its Hugging Face transformers name (config hidden_act / "
        "activation_function, activations.py ACT2FN): which kernels an eager transformers stack runs for "
        "it (graph.eager_modules; gelu_new is a composite of element-wise ops); None: the mlp's one kernel",
    )
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    tie_embeddings: bool = False
    bias: bool | None = None
    qkv_bias: bool | None = Field(
        default=None, description="biases on the q/k/v projections only (Qwen2); default: as bias"
    )
    sliding_window: int | None = Field(
        default=None,
        gt=0,
        description="each query attends to at most this many most recent keys (Mistral 7B v0.1, Jiang et al. "
        "2023, §2); None = the whole causal prefix",
    )
    dropout: bool | None = Field(
        default=None, description="hidden/attention dropout on; default: gelu models yes"
    )
    position_embedding: Literal["learned", "rope"] | None = None
    max_position: int = Field(default=2048, gt=0, description="rows of a learned position table")
    # ---- mixture-of-experts, MLA, MTP (issue 9; rules and derived shape in specs/moe_model.py) ----
    experts: int = Field(0, ge=0, description="routed experts per MoE layer; 0 = dense model")
    top_k: int = Field(
        0, ge=0, description="routed experts each token is sent to (1 <= top_k <= experts)"
    )
    moe_ffn_hidden: int | None = Field(None, gt=0, description="inner width of one routed expert")
    shared_experts: int = Field(
        0, ge=0, description="experts every token passes through (DeepSeekMoE)"
    )
    shared_ffn_hidden: int | None = Field(
        None,
        gt=0,
        description="total inner width of the shared expert(s); default shared_experts·moe_ffn_hidden",
    )
    dense_layers: int = Field(
        0, ge=0, description="leading dense layers (MLP width ffn_hidden) before the MoE layers"
    )
    moe_layer_interval: int = Field(
        1, gt=0, description="after the dense layers, every n-th layer is MoE (1 = all)"
    )
    router_balancing: RouterBalancing | None = Field(
        None,
        description="how the router was trained to balance its experts: aux_loss (Switch/GShard auxiliary loss), "
        "seq_aux_loss, global_aux_loss (over the global batch), aux_free (DeepSeek's bias-controlled routing), "
        "none; sets the default expert-load spread (graph.routing.published_expert_cv)",
    )
    router_balance_coeff: float | None = Field(
        None,
        ge=0,
        description="the balancing's coefficient: auxiliary-loss weight, or the bias update speed of aux_free",
    )
    router_groups: int | None = Field(
        None,
        gt=1,
        description="group-limited routing: experts in this many groups of consecutive ids (HF n_group; cost.moe.experts_units_hit)",
    )
    router_group_topk: int | None = Field(
        None,
        gt=0,
        description="group-limited routing: the groups a token may use (HF topk_group; DeepSeek-V3 4 of 8)",
    )
    attention_type: Literal["gqa", "mla"] = Field(
        "gqa", description="gqa (MHA/GQA/MQA) or mla (DeepSeek-V2 latent attention)"
    )
    q_lora_rank: int | None = Field(
        None, gt=0, description="MLA query compression rank; null = no query compression"
    )
    kv_lora_rank: int | None = Field(
        None, gt=0, description="MLA joint key/value compression rank d_c"
    )
    qk_nope_head_dim: int | None = Field(
        None, gt=0, description="MLA per-head query/key width without rotary"
    )
    qk_rope_head_dim: int | None = Field(
        None, gt=0, description="MLA per-head decoupled rotary query/key width"
    )
    v_head_dim: int | None = Field(None, gt=0, description="MLA per-head value width")
    mtp_layers: int = Field(
        0, ge=0, description="multi-token-prediction modules (DeepSeek-V3 §2.2)"
    )
    # sliding_window (above) is the window of the windowed layers; the pattern says which are windowed
    sliding_window_pattern: int = Field(
        0,
        ge=0,
        description="0: every layer windowed; n: every n-th layer full, the others windowed",
    )
    window_kind: Literal["sliding", "chunked"] = Field(
        "sliding",
        description="sliding: query i sees the w keys before it; chunked: the keys of its own block of w "
        "tokens (Llama 4's chunked attention, attention_chunk_size; transformers modeling_llama4)",
    )
    glu_clamp: float | None = Field(
        None,
        gt=0,
        description="the experts' clamped GLU: the gate clamped above and the linear half to ±limit before "
        "the activation (gpt-oss swiglu_limit; graph.moe_mlp.expert_glu_clamp_op); null: no clamp",
    )
    # ---- end of the MoE block -------------------------------------------------------------

    # ---- architectures beyond decoder-only GPT, and explicit layer lists (issue 10) -------------
    # decoder: causal self-attention (GPT, Llama). encoder: bidirectional self-attention, no causal
    # discount (BERT, Devlin et al. 2019; ViT, Dosovitskiy et al. 2021). encoder_decoder: T5 (Raffel
    # et al. 2020): ``encoder_layers`` encoder layers, then ``layers`` decoder layers that add
    # cross-attention over the encoder output. The plan's seq_length is the (encoder) input length.
    architecture: Literal["decoder", "encoder", "encoder_decoder"] = "decoder"
    encoder_layers: int | None = Field(
        default=None, gt=0, description="encoder_decoder: encoder layers"
    )
    decoder_seq_length: int | None = Field(
        default=None,
        gt=0,
        description="encoder_decoder: target length; default the plan's seq_length",
    )
    patch_size: int | None = Field(
        default=None,
        gt=0,
        description="ViT: patches of p×p pixels replace the token embedding; vocab = classes",
    )
    image_channels: int = Field(default=3, gt=0, description="ViT: channels of the input image")
    layer_widths: tuple[LayerWidth, ...] | None = Field(
        default=None,
        description="explicit list of layer groups of differing widths, in order; counts sum to all layers",
    )
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
            raise ValueError(
                f"hidden={self.hidden} is not divisible by heads={self.heads}; give head_dim"
            )
        from paraplan.specs.moe_model import moe_model_problems

        problems = moe_model_problems(self)
        if problems:
            raise ValueError(problems[0])
        return self._check_architecture()

    # ---- architectures and layer lists (issue 10) ------------------------------------------------
    def _check_architecture(self) -> "ModelSpec":
        if self.encoder_layers is not None and self.architecture != "encoder_decoder":
            raise ValueError(
                f"encoder_layers={self.encoder_layers} needs architecture='encoder_decoder'"
            )
        if self.decoder_seq_length is not None and self.architecture != "encoder_decoder":
            raise ValueError(
                f"decoder_seq_length={self.decoder_seq_length} needs architecture='encoder_decoder'"
            )
        if self.patch_size is not None and self.architecture != "encoder":
            raise ValueError(f"patch_size={self.patch_size} (ViT) needs architecture='encoder'")
        if self.layer_widths is not None:
            total = sum(w.count for w in self.layer_widths)
            if total != self.total_layers:
                raise ValueError(
                    f"layer_widths counts sum to {total}; must equal all transformer layers = {self.total_layers}"
                )
            for w in self.layer_widths:
                self.widened(w)  # each group must be a valid shape on its own
        return self

    @property
    def total_layers(self) -> int:
        """Transformer layers of every kind: encoder + decoder for T5, else ``layers``."""
        return self.layers + (
            self.n_encoder_layers if self.architecture == "encoder_decoder" else 0
        )

    @property
    def n_encoder_layers(self) -> int:
        return self.encoder_layers if self.encoder_layers is not None else self.layers

    @property
    def is_vit(self) -> bool:
        return self.patch_size is not None

    def widened(self, width: "LayerWidth") -> "ModelSpec":
        """This model with one layer group's widths (a plain shape: no layer list, one layer)."""
        data = self.model_dump()
        data.update({k: v for k, v in width.model_dump().items() if k != "count" and v is not None})
        data.update(layers=1, encoder_layers=None, layer_widths=None, decoder_seq_length=None)
        if data["architecture"] == "encoder_decoder":
            data["architecture"] = "decoder"
        return ModelSpec.model_validate(data)

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
    def has_qkv_bias(self) -> bool:
        return self.qkv_bias if self.qkv_bias is not None else self.has_bias

    def mean_visible_keys(self, seq_length: int, windowed: bool = True) -> float:
        """Keys a query attends to, averaged over a sequence of s tokens: query i sees min(i, w) keys
        under the causal mask and a sliding window w, so the mean is (s+1)/2 without a window and
        (w(w+1)/2 + (s-w)·w)/s with one (w < s); with chunked attention (window_kind) query i sees the
        keys of its own block of w tokens up to itself. ``windowed=False``: a full-attention layer of a
        model whose window pattern (sliding_window_pattern) leaves some layers unwindowed."""
        s, w = seq_length, (self.sliding_window if windowed else None)
        if w is None or w >= s:
            return (s + 1) / 2.0
        if (
            self.window_kind == "chunked"
        ):  # blocks of w tokens, causal within each: (q·w(w+1)/2 + r(r+1)/2)/s
            blocks, rest = divmod(s, w)
            return (blocks * w * (w + 1) / 2.0 + rest * (rest + 1) / 2.0) / s
        return (w * (w + 1) / 2.0 + (s - w) * w) / s

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
