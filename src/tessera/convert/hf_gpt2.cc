// Hugging Face table of GPT-2 (GPT2LMHeadModel; Tessera's gpt3 block), hf_family.h. GPT-2 stores
// its projections as Conv1D weights, already [in, out] as Tessera's kernels, and fuses q, k and v
// into c_attn, whose column blocks 0, 1, 2 (of the weight [E, 3E] and the bias [3E]) they are.
// transformers names the tensors transformer.h.0...; the Hub's original checkpoint h.0...
#include "tessera/convert/hf_family.h"

namespace tessera::convert {

const HfFamily kHfGpt2{
    .model_type = "gpt2",
    .architecture = "GPT2LMHeadModel",
    .blocks = {"gpt3"},
    .fields =
        {
            {"n_embd", "base_emb_dim", HfValue::kCount},
            {"n_inner", "base_mlp_dim", HfValue::kCount, "4*@n_embd"},
            {"n_layer", "base_num_decoder_layers", HfValue::kCount},
            {"n_head", "base_num_query_heads base_num_kv_heads", HfValue::kCount},
            {"head_dim", "head_dim", HfValue::kCount, "@n_embd/@n_head", true},
            {"vocab_size", "vocab_size", HfValue::kCount},
            {"n_positions", "trainable_position_size", HfValue::kCount},
            {"layer_norm_epsilon", "normalization_layer_epsilon", HfValue::kReal, "1e-05"},
            {"tie_word_embeddings", "logits_via_embedding", HfValue::kBool, "true"},
        },
    .fixed =
        {
            {"activation_function", "\"gelu_new\"",
             "not supported: Tessera's GPT-2 MLP is the tanh GELU (activation_function gelu_new)"},
            {"scale_attn_weights", "true", "not supported: Tessera scales attention logits by 1/sqrt(D)"},
            {"scale_attn_by_inverse_layer_idx", "false", "not supported: Tessera has no per-layer scaling"},
            {"add_cross_attention", "false", "not supported: Tessera's GPT-2 has no cross-attention"},
        },
    .keys = {{"decoder_block", "gpt3"}, {"mlp_activations", "[\"gelu\"]"}},
    // Dropout rates act in training only (Tessera trains GPT-2 without dropout); the summary_*
    // fields describe GPT2DoubleHeadsModel's head; n_ctx is n_positions' old name.
    .harmless =
        "n_ctx resid_pdrop embd_pdrop attn_pdrop summary_type summary_use_proj summary_activation "
        "summary_proj_to_labels summary_first_dropout reorder_and_upcast_attn",
    .rope_types = "",
    .optional_prefix = "transformer.",
    .buffers = ".attn.bias .attn.masked_bias",
    .tensors =
        {
            {"token_embedder.embedding", "transformer.wte.weight"},
            {"decoder.position_embedder.embedding", "transformer.wpe.weight"},
            {"decoder.layers_{l}.pre_self_attention_norm.scale", "transformer.h.{l}.ln_1.weight"},
            {"decoder.layers_{l}.pre_self_attention_norm.bias", "transformer.h.{l}.ln_1.bias"},
            {"decoder.layers_{l}.self_attention.query.kernel", "transformer.h.{l}.attn.c_attn.weight", false,
             HfSplit::kBlock, 0, 3},
            {"decoder.layers_{l}.self_attention.key.kernel", "transformer.h.{l}.attn.c_attn.weight", false,
             HfSplit::kBlock, 1, 3},
            {"decoder.layers_{l}.self_attention.value.kernel", "transformer.h.{l}.attn.c_attn.weight", false,
             HfSplit::kBlock, 2, 3},
            {"decoder.layers_{l}.self_attention.query.bias", "transformer.h.{l}.attn.c_attn.bias", false,
             HfSplit::kBlock, 0, 3},
            {"decoder.layers_{l}.self_attention.key.bias", "transformer.h.{l}.attn.c_attn.bias", false,
             HfSplit::kBlock, 1, 3},
            {"decoder.layers_{l}.self_attention.value.bias", "transformer.h.{l}.attn.c_attn.bias", false,
             HfSplit::kBlock, 2, 3},
            {"decoder.layers_{l}.self_attention.out.kernel", "transformer.h.{l}.attn.c_proj.weight"},
            {"decoder.layers_{l}.self_attention.out.bias", "transformer.h.{l}.attn.c_proj.bias"},
            {"decoder.layers_{l}.mlp_norm.scale", "transformer.h.{l}.ln_2.weight"},
            {"decoder.layers_{l}.mlp_norm.bias", "transformer.h.{l}.ln_2.bias"},
            {"decoder.layers_{l}.mlp.wi.kernel", "transformer.h.{l}.mlp.c_fc.weight"},
            {"decoder.layers_{l}.mlp.wi.bias", "transformer.h.{l}.mlp.c_fc.bias"},
            {"decoder.layers_{l}.mlp.wo.kernel", "transformer.h.{l}.mlp.c_proj.weight"},
            {"decoder.layers_{l}.mlp.wo.bias", "transformer.h.{l}.mlp.c_proj.bias"},
            {"decoder.decoder_norm.scale", "transformer.ln_f.weight"},
            {"decoder.decoder_norm.bias", "transformer.ln_f.bias"},
            {"decoder.logits_dense.kernel", "lm_head.weight", true},
        },
};

}  // namespace tessera::convert
