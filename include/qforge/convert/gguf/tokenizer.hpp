// The tokenizer.* metadata of a converted GGUF: either copied, key by key, from a template GGUF
// (--tokenizer-from FILE.gguf), or converted from a byte-level BPE tokenizer.json the way
// LC convert_hf_to_gguf.py get_vocab_base + gguf-py SpecialVocab do (tokenizer.ggml.model
// "gpt2", tokens by id with [PAD<i>] for holes, token types NORMAL 1 / CONTROL 3 /
// USER_DEFINED 4, merges "a b", special ids UINT32, add_bos/eos BOOL), with the pre-tokenizer
// name given by the user (llama.cpp refuses unknown names; qforge cannot derive it from the
// regexes). Anything else (SentencePiece, WordPiece, Unigram, byte-fallback BPE) is refused.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qforge/core/error.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/gguf/reader.hpp"
#include "qforge/io/gguf/value.hpp"
#include "qforge/io/json.hpp"

namespace qforge::gguf {

/// Every tokenizer.* key of a template GGUF, in its order.
inline kv_list tokenizer_from_gguf(const std::string& path) {
    const reader r(path);
    kv_list out;
    for (const auto& [k, v] : r.metadata())
        if (k.starts_with("tokenizer.")) out.emplace_back(k, v);
    if (!find_kv(out, "tokenizer.ggml.model"))
        fail<unsupported_error>(path, "", "template GGUF has no tokenizer.ggml.model key");
    return out;
}

namespace detail {

inline bool is_byte_level(const json* node) {
    if (!node || !node->is_object()) return false;
    const json* type = node->find("type");
    if (type && type->is_string() && type->as_string() == "ByteLevel") return true;
    for (const char* list : {"pretokenizers", "decoders"})
        if (const json* items = node->find(list); items && items->is_array())
            for (const json& item : items->as_array())
                if (is_byte_level(&item)) return true;
    return false;
}

inline std::optional<std::uint32_t> config_id(const json& cfg, const char* key) {
    const json* v = cfg.find(key);
    if (!v || !v->is_int() || v->as_int() < 0 || v->as_int() > 0xFFFFFFFF) return std::nullopt;
    return static_cast<std::uint32_t>(v->as_int());
}

}  // namespace detail

/// tokenizer.* keys converted from a byte-level BPE tokenizer.json. `config` is config.json
/// (vocab_size, bos/eos/pad ids); `tokenizer_config` may be null (add_bos_token/add_eos_token).
inline kv_list tokenizer_from_json(const std::string& path, const std::string& pre_tokenizer, const json& config,
                                   const json* tokenizer_config) {
    if (pre_tokenizer.empty())
        fail<unsupported_error>(path, "", "converting tokenizer.json needs the llama.cpp pre-tokenizer name (e.g. llama-bpe, qwen2)");
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
