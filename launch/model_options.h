// Options that pick a model shape and a tokenizer, shared by `train` and `sample`.
// defines: add_model_options, read_model_config, add_tokenizer_options, tokenizer_vocab_size
#pragma once

#include <boost/program_options.hpp>
#include <filesystem>
#include <string>

#include "models/gpt_config.h"

namespace mt {

void add_model_options(boost::program_options::options_description& desc);
// The preset of --model with every shape option given on top; vocab from the tokenizer. The llama
// options (--kv-heads, --ffn-hidden, --rope-theta, --norm-eps) are refused for a gpt2 preset.
GptConfig read_model_config(const boost::program_options::variables_map& vm, int vocab_size);

void add_tokenizer_options(boost::program_options::options_description& desc);
std::string tokenizer_name(const boost::program_options::variables_map& vm);  // gpt2, cl100k, o200k, bytes
std::filesystem::path tokenizer_dir(const boost::program_options::variables_map& vm);
int tokenizer_vocab_size(const std::string& name);  // 50257, 100277, 200019, 256: no file read

}  // namespace mt
