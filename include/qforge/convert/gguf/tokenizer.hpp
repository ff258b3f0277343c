// The tokenizer.* metadata of a converted GGUF: either copied, key by key, from a template GGUF
// (--tokenizer-from FILE.gguf), or converted from a byte-level BPE tokenizer.json the way
// LC convert_hf_to_gguf.py get_vocab_base + gguf-py SpecialVocab do (tokenizer.ggml.model
// "gpt2", tokens by id with [PAD<i>] for holes, token types NORMAL 1 / CONTROL 3 /
// USER_DEFINED 4, merges "a b", special ids UINT32, add_bos/eos BOOL), with the pre-tokenizer
// name given by the user and checked against the names llama.cpp accepts (LC src/llama-vocab.cpp
// llama_vocab::impl::load refuses any other: "unknown pre-tokenizer type"; qforge cannot derive
// the name from the regexes). Anything else (SentencePiece, WordPiece, Unigram, byte-fallback
// BPE) is refused.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/core/config.hpp"
#include "qforge/core/error.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/gguf/reader.hpp"
#include "qforge/io/gguf/value.hpp"
#include "qforge/io/json.hpp"

namespace qforge::gguf {

/// One tokenizer.ggml.pre value llama.cpp accepts for a BPE vocabulary.
struct pre_tokenizer_name {
    std::string_view name;
    bool in_b4753;  // also accepted by llama.cpp b4753 (c392e509's era); false: only by newer releases
};

/// Every pre-tokenizer name of LC src/llama-vocab.cpp llama_vocab::impl::load's tokenizer_pre
/// comparisons: those of b4753 (in_b4753), then the ones added up to 00ad355e. b4753's list is
/// a subset of the newer one, so a file with an in_b4753 name loads in every llama.cpp since.
QFORGE_DECL std::span<const pre_tokenizer_name> llama_pre_tokenizers() noexcept;

namespace detail {
/// Lower case without '-', '_', '.': "GPT2" and "gpt_2" both become "gpt2", as "gpt-2" does.
QFORGE_DECL std::string loose_name(std::string_view s);
}  // namespace detail

/// Refuses a pre-tokenizer name llama.cpp would refuse at load time, naming the closest known
/// one (gpt2 -> gpt-2) and listing every name. `file` is where the name comes from.
QFORGE_DECL void check_pre_tokenizer(std::string_view name, const std::string& file);

/// Every tokenizer.* key of a template GGUF, in its order.
QFORGE_DECL kv_list tokenizer_from_gguf(const std::string& path);

namespace detail {

QFORGE_DECL bool is_byte_level(const json* node);

QFORGE_DECL std::optional<std::uint32_t> config_id(const json& cfg, const char* key);

}  // namespace detail

/// tokenizer.* keys converted from a byte-level BPE tokenizer.json. `config` is config.json
/// (vocab_size, bos/eos/pad ids); `tokenizer_config` may be null (add_bos_token/add_eos_token).
QFORGE_DECL kv_list tokenizer_from_json(const std::string& path, const std::string& pre_tokenizer, const json& config,
                                        const json* tokenizer_config);

}  // namespace qforge::gguf

#if QFORGE_BODIES_HERE

namespace qforge::gguf {

QFORGE_DECL std::span<const pre_tokenizer_name> llama_pre_tokenizers() noexcept {
    static constexpr pre_tokenizer_name names[] = {
        {"default", true}, {"llama3", true}, {"llama-v3", true}, {"llama-bpe", true}, {"falcon3", true},
        {"deepseek-llm", true}, {"deepseek-coder", true}, {"deepseek-v3", true}, {"falcon", true}, {"mpt", true},
        {"starcoder", true}, {"gpt-2", true}, {"phi-2", true}, {"jina-es", true}, {"jina-de", true},
        {"gigachat", true}, {"jina-v1-en", true}, {"jina-v2-es", true}, {"jina-v2-de", true}, {"jina-v2-code", true},
        {"roberta-bpe", true}, {"refact", true}, {"command-r", true}, {"qwen2", true}, {"deepseek-r1-qwen", true},
        {"stablelm2", true}, {"olmo", true}, {"dbrx", true}, {"smaug-bpe", true}, {"poro-chat", true},
        {"chatglm-bpe", true}, {"viking", true}, {"jais", true}, {"tekken", true}, {"smollm", true},
        {"codeshell", true}, {"bloom", true}, {"gpt3-finnish", true}, {"exaone", true}, {"chameleon", true},
        {"minerva-7b", true}, {"megrez", true},
        {"minicpm5", false}, {"falcon-h1", false}, {"pixtral", false}, {"midm-2.0", false}, {"lfm2", false},
        {"jina-v5-nano", false}, {"spark2_5", false}, {"youtu", false}, {"a.x-4.0", false}, {"mellum", false},
        {"modern-bert", false}, {"jais-2", false}, {"gemma4", false}, {"granite-embed-multi-311m", false},
        {"sarvam-moe", false}, {"whitespace", false}, {"kormo", false}, {"f2llmv2", false}, {"qwen35", false},
        {"glm4", false}, {"exaone4", false}, {"exaone-moe", false}, {"gpt-4o", false}, {"llama4", false},
        {"kanana2", false}, {"talkie", false}, {"granite-embed-multi-97m", false}, {"tiny_aya", false},
        {"cohere2moe", false}, {"superbpe", false}, {"trillion", false}, {"granite-docling", false},
        {"bailingmoe", false}, {"bailingmoe2", false}, {"llada-moe", false}, {"seed-coder", false},
        {"hunyuan", false}, {"hunyuan-dense", false}, {"hy_v4", false}, {"joyai-llm", false}, {"kimi-k2", false},
        {"ufakzeka", false}, {"grok-2", false}, {"afmoe", false}, {"laguna", false}, {"minimax-m2", false},
        {"solar-open", false}, {"mellum2", false},
    };
    return names;
}

namespace detail {

QFORGE_DECL std::string loose_name(std::string_view s) {
    std::string out;
    for (char c : s) {
        if (c == '-' || c == '_' || c == '.') continue;
        out += c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    }
    return out;
}

}  // namespace detail

QFORGE_DECL void check_pre_tokenizer(std::string_view name, const std::string& file) {
    std::string list, close;
    for (const auto& n : llama_pre_tokenizers()) {
        if (n.name == name) return;
        if (detail::loose_name(n.name) == detail::loose_name(name)) close = n.name;
        list += (list.empty() ? "" : ", ") + std::string(n.name);
    }
    fail<unsupported_error>(file, "", "llama.cpp does not know the pre-tokenizer '" + std::string(name) +
                                          "' and refuses such a file (\"unknown pre-tokenizer type\")" +
                                          (close.empty() ? "" : "; did you mean '" + close + "'?") +
                                          " Known names: " + list);
}

QFORGE_DECL kv_list tokenizer_from_gguf(const std::string& path) {
    const reader r(path);
    kv_list out;
    for (const auto& [k, v] : r.metadata())
        if (k.starts_with("tokenizer.")) out.emplace_back(k, v);
    const value* model = find_kv(out, "tokenizer.ggml.model");
    if (!model) fail<unsupported_error>(path, "", "template GGUF has no tokenizer.ggml.model key");
    if (const value* pre = find_kv(out, "tokenizer.ggml.pre"); pre && model->as<std::string>() == "gpt2") {
        const auto name = pre->as<std::string>();
        if (!name) fail<format_error>(path, "", "tokenizer.ggml.pre is not a string");
        check_pre_tokenizer(*name, path);
    }
    return out;
}

namespace detail {

QFORGE_DECL bool is_byte_level(const json* node) {
    if (!node || !node->is_object()) return false;
    const json* type = node->find("type");
    if (type && type->is_string() && type->as_string() == "ByteLevel") return true;
    for (const char* list : {"pretokenizers", "decoders"})
        if (const json* items = node->find(list); items && items->is_array())
            for (const json& item : items->as_array())
                if (is_byte_level(&item)) return true;
    return false;
}

QFORGE_DECL std::optional<std::uint32_t> config_id(const json& cfg, const char* key) {
    const json* v = cfg.find(key);
    if (!v || !v->is_int() || v->as_int() < 0 || v->as_int() > 0xFFFFFFFF) return std::nullopt;
    return static_cast<std::uint32_t>(v->as_int());
}

}  // namespace detail

QFORGE_DECL kv_list tokenizer_from_json(const std::string& path, const std::string& pre_tokenizer, const json& config,
                                        const json* tokenizer_config) {
    if (pre_tokenizer.empty())
        fail<unsupported_error>(path, "", "converting tokenizer.json needs the llama.cpp pre-tokenizer name (e.g. llama-bpe, qwen2)");
    check_pre_tokenizer(pre_tokenizer, path);
    const json tok = json::parse(io::read_file(path, std::uint64_t{512} << 20), path);
    const json* model = tok.find("model");
    if (!model || !model->is_object()) fail<format_error>(path, "", "no \"model\" object");
    const json* type = model->find("type");
    if (!type || !type->is_string() || type->as_string() != "BPE")
        fail<unsupported_error>(path, "", "only BPE tokenizers can be converted; use a template GGUF instead");
    if (const json* bf = model->find("byte_fallback"); bf && bf->is_bool() && bf->as_bool())
        fail<unsupported_error>(path, "", "byte-fallback (SentencePiece-style) BPE cannot be converted; use a template GGUF");
    if (!detail::is_byte_level(tok.find("pre_tokenizer")) && !detail::is_byte_level(tok.find("decoder")))
        fail<unsupported_error>(path, "", "BPE tokenizer is not byte-level; use a template GGUF");

    // id -> (token, type); vocab first, then added tokens (which win, as in transformers)
    std::vector<std::string> tokens;
    std::vector<std::int32_t> types;
    std::vector<bool> present;
    auto place = [&](std::int64_t id, const std::string& text, std::int32_t t, const std::string& where) {
        if (id < 0 || id > (std::int64_t{1} << 24)) fail<format_error>(path, "", where + ": token id " + std::to_string(id) + " out of range");
        const auto i = static_cast<std::size_t>(id);
        if (i >= tokens.size()) {
            tokens.resize(i + 1);
            types.resize(i + 1, 4);
            present.resize(i + 1, false);
        }
        tokens[i] = text;
        types[i] = t;
        present[i] = true;
    };
    const json* vocab = model->find("vocab");
    if (!vocab || !vocab->is_object()) fail<format_error>(path, "", "model.vocab is not an object");
    for (const auto& m : vocab->as_object()) place(m.value.as_int(), m.key, 1, "model.vocab");
    if (const json* added = tok.find("added_tokens"); added && added->is_array()) {
        for (const json& a : added->as_array()) {
            const json* special = a.find("special");
            place(a.at("id").as_int(), a.at("content").as_string(), special && special->is_bool() && special->as_bool() ? 3 : 4,
                  "added_tokens");
        }
    }
    std::size_t vocab_size = tokens.size();
    if (const auto n = detail::config_id(config, "vocab_size")) {
        if (*n < tokens.size())
            fail<unsupported_error>(path, "", "tokenizer has " + std::to_string(tokens.size()) + " ids but config.json vocab_size is " +
                                                  std::to_string(*n));
        vocab_size = *n;
    }
    tokens.resize(vocab_size);
    types.resize(vocab_size, 4);
    present.resize(vocab_size, false);
    for (std::size_t i = 0; i < vocab_size; ++i)
        if (!present[i]) {
            tokens[i] = "[PAD" + std::to_string(i) + "]";
            types[i] = 4;  // USER_DEFINED, as convert_hf_to_gguf does
        }

    std::vector<std::string> merges;
    if (const json* mg = model->find("merges"); mg && mg->is_array()) {
        for (const json& m : mg->as_array()) {
            if (m.is_string()) {
                merges.push_back(m.as_string());
            } else if (m.is_array() && m.size() == 2) {
                merges.push_back(m.at(0).as_string() + " " + m.at(1).as_string());
            } else {
                fail<format_error>(path, "", "a merge is neither \"a b\" nor [a, b]");
            }
        }
    }
    if (merges.empty()) fail<unsupported_error>(path, "", "BPE tokenizer without merges");

    kv_list kv;
    kv.emplace_back("tokenizer.ggml.model", value::str("gpt2"));
    kv.emplace_back("tokenizer.ggml.pre", value::str(pre_tokenizer));
    kv.emplace_back("tokenizer.ggml.tokens", value::array_of<std::string>(value_type::string, tokens));
    kv.emplace_back("tokenizer.ggml.token_type", value::array_of<std::int32_t>(value_type::i32, types));
    kv.emplace_back("tokenizer.ggml.merges", value::array_of<std::string>(value_type::string, merges));
    for (const auto& [cfg_key, gguf_key] : {std::pair{"bos_token_id", "tokenizer.ggml.bos_token_id"},
                                            std::pair{"eos_token_id", "tokenizer.ggml.eos_token_id"},
                                            std::pair{"pad_token_id", "tokenizer.ggml.padding_token_id"}})
        if (const auto id = detail::config_id(config, cfg_key)) {
            if (*id >= vocab_size) fail<format_error>("config.json", "", std::string(cfg_key) + " is outside the vocabulary");
            kv.emplace_back(gguf_key, value::u32(*id));
        }
    if (tokenizer_config)
        for (const auto& [tc_key, gguf_key] : {std::pair{"add_bos_token", "tokenizer.ggml.add_bos_token"},
                                               std::pair{"add_eos_token", "tokenizer.ggml.add_eos_token"}})
            if (const json* b = tokenizer_config->find(tc_key); b && b->is_bool()) kv.emplace_back(gguf_key, value::boolean(b->as_bool()));
    return kv;
}

}  // namespace qforge::gguf
#endif
