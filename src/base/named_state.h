// Named state: an ordered name -> value map, as a state_dict, for what an algorithm or a
// server role saves and loads (Algorithm::state / load, Algorithm::export_state /
// import_state, OuterServer::state / load). Each value is an integer, a real or a tensor (a
// tensor may be undefined: "not used yet"). Entries keep the order they were added in, which
// is the order a checkpoint section lists them (src/core/tensor_codec.h named_state_layout;
// docs/checkpoints.md "Named state").
//
// Readers ask by name and kind: integer("round"), tensor("anchor"). A missing entry or one of
// another kind is a c10::Error naming the entry: the checkpoint or hand-over is refused. A
// hand-over is a subset of a checkpoint: the same names for the same values
// (docs/checkpoints.md).
//
// Header-only on ATen's tensor; no atoll library links for it.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace atl {

class NamedState {
 public:
  enum class Kind : uint8_t { kInteger = 1, kReal = 2, kTensor = 3 };
  struct Entry {
    std::string name;
    Kind kind = Kind::kInteger;
    int64_t integer = 0;
    double real = 0;
    at::Tensor tensor;
  };

  // Adders: a name already present is a programming error.
  NamedState& add(std::string name, int64_t v) {
    push(std::move(name), Kind::kInteger).integer = v;
    return *this;
  }
  NamedState& add_real(std::string name, double v) {
    push(std::move(name), Kind::kReal).real = v;
    return *this;
  }
  NamedState& add(std::string name, at::Tensor t) {
    push(std::move(name), Kind::kTensor).tensor = std::move(t);
    return *this;
  }

  bool has(const std::string& name) const { return find(name) != nullptr; }
  int64_t integer(const std::string& name) const { return get(name, Kind::kInteger).integer; }
  double real(const std::string& name) const { return get(name, Kind::kReal).real; }
  const at::Tensor& tensor(const std::string& name) const { return get(name, Kind::kTensor).tensor; }

  // The entries named `names`, in that order (a hand-over taken from a checkpoint's state).
  NamedState only(const std::vector<std::string>& names) const {
    NamedState s;
    for (const std::string& n : names) {
      const Entry* e = find(n);
      TORCH_CHECK(e != nullptr, "state has no entry '", n, "'");
      s.push(e->name, e->kind) = *e;
    }
    return s;
  }

  const std::vector<Entry>& entries() const { return entries_; }
  std::vector<Entry>& entries() { return entries_; }
  bool empty() const { return entries_.empty(); }

 private:
  Entry& push(std::string name, Kind kind) {
    TORCH_CHECK(find(name) == nullptr, "state entry '", name, "' added twice");
    entries_.push_back(Entry{std::move(name), kind, 0, 0, {}});
    return entries_.back();
  }
  const Entry* find(const std::string& name) const {
    for (const Entry& e : entries_)
      if (e.name == name) return &e;
    return nullptr;
  }
  const Entry& get(const std::string& name, Kind kind) const {
    const Entry* e = find(name);
    static const char* const kNames[] = {"", "integer", "real", "tensor"};
    TORCH_CHECK(e != nullptr, "state has no ", kNames[static_cast<int>(kind)], " '", name, "'");
    TORCH_CHECK(e->kind == kind, "state entry '", name, "' is not a ", kNames[static_cast<int>(kind)]);
    return *e;
  }

  std::vector<Entry> entries_;
};

}  // namespace atl
