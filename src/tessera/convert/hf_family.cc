// The registry of the Hugging Face tables (hf_family.h).
#include "tessera/convert/hf_family.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace tessera::convert {

const std::vector<const HfFamily*>& hf_families() {
  static const std::vector<const HfFamily*> all = {&kHfLlama,  &kHfMistral, &kHfQwen2,  &kHfQwen3,
                                                   &kHfGpt2,   &kHfMixtral, &kHfGptOss, &kHfGemma,
                                                   &kHfGemma2, &kHfGemma3};
  return all;
}

const HfFamily* hf_family_of_model_type(std::string_view model_type) {
  for (const HfFamily* f : hf_families())
    if (f->model_type == model_type) return f;
  return nullptr;
}

const HfFamily* hf_family_of_block(std::string_view decoder_block) {
  for (const HfFamily* f : hf_families())
    if (std::find(f->blocks.begin(), f->blocks.end(), decoder_block) != f->blocks.end()) return f;
  return nullptr;
}

std::vector<std::string_view> hf_words(std::string_view list) {
  std::vector<std::string_view> out;
  for (size_t pos = 0; pos < list.size();) {
    const size_t end = std::min(list.find(' ', pos), list.size());
    if (end > pos) out.push_back(list.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

std::string hf_model_types() {
  std::vector<std::string_view> names;
  for (const HfFamily* f : hf_families()) names.push_back(f->model_type);
  return fmt::format("{}", fmt::join(names, ", "));
}

std::string hf_blocks() {
  std::vector<std::string_view> names;
  for (const HfFamily* f : hf_families()) names.push_back(f->blocks.front());
  return fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace tessera::convert
