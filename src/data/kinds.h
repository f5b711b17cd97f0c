// The kinds of data a run trains on (data.kind), and what each is: the torch-free half of
// the data registry, read by src/config (the key's names, which files it needs), validation
// and the data layer (never by comparing names). How each kind is loaded is its row of
// src/data/splits.cpp (same order; a test checks the two agree). A new kind is its reader
// plus one row in each.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace atl::data {

struct DataKind {
  const char* name;
  bool reads_file;   // data.path (and data.val_path) name its files
  bool labels_file;  // data.labels_path (and data.val_labels_path) too: IDX labels
  bool language;     // token sequences for a language model; else labelled examples
                     // (classification: data.normalize, partition by label)
  int fixed_vocab;   // vocabulary known without reading the data (text: 256 bytes); 0: from it
  bool generated;    // examples generated from the config (shape from data.synthetic_*)
};

inline constexpr DataKind kDataKinds[] = {
    {"text", true, false, true, 256, false},        // bytes of a text file (docs/data.md)
    {"tokens", true, false, true, 0, false},        // a file of token ids
    {"idx", true, true, false, 0, false},           // IDX images and labels (MNIST's format)
    {"synthetic", false, false, false, 0, true},    // generated classification data
};

// The row of `name`, or nullptr.
inline const DataKind* find_data_kind(std::string_view name) {
  for (const auto& k : kDataKinds)
    if (name == k.name) return &k;
  return nullptr;
}

inline std::vector<std::string> data_kind_names() {
  std::vector<std::string> names;
  for (const auto& k : kDataKinds) names.emplace_back(k.name);
  return names;
}

}  // namespace atl::data
