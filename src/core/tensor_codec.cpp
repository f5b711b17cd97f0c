#include "src/core/tensor_codec.h"

#include <ATen/ATen.h>

#include <set>
#include <string>
#include <utility>

#include "src/base/named_state.h"

namespace atl::core {
namespace {

constexpr std::pair<uint8_t, at::ScalarType> kDtypes[] = {
    {1, at::kFloat}, {2, at::kDouble}, {3, at::kLong},     {4, at::kByte},
    {5, at::kInt},   {6, at::kBFloat16}, {7, at::kHalf},
};

}  // namespace

std::optional<uint8_t> dtype_id(c10::ScalarType type) {
  for (const auto& [id, t] : kDtypes)
    if (t == type) return id;
  return std::nullopt;
}

std::optional<c10::ScalarType> dtype_of_id(uint8_t id) {
  for (const auto& [i, t] : kDtypes)
    if (i == id) return t;
  return std::nullopt;
}

void put_tensor(bytes::Writer<std::string>& w, const at::Tensor& t) {
  if (!t.defined()) {
    w.u8(0);
    return;
  }
  const auto id = dtype_id(t.scalar_type());
  TORCH_CHECK(id, "tensor codec: tensors of dtype ", t.scalar_type(), " are not stored");
  const at::Tensor c = t.detach().to(at::kCPU).contiguous();
  w.u8(1);
  w.u8(*id);
  w.i64s(c.sizes().vec());
  w.u64(c.nbytes());
  w.raw(c.data_ptr(), c.nbytes());
}

at::Tensor get_tensor(bytes::Reader& r) {
  const uint8_t defined = r.u8("tensor flag");
  if (defined == 0) return {};
  if (defined != 1) {
    r.fail("tensor: bad flag " + std::to_string(defined));
    return {};
  }
  const uint8_t id = r.u8("tensor dtype");
  const std::vector<int64_t> sizes = r.i64s("tensor sizes");
  const uint64_t nbytes = r.u64("tensor byte count");
  if (!r.ok()) return {};
  const auto type = dtype_of_id(id);
  if (!type) {
    r.fail("tensor: unknown dtype id " + std::to_string(id));
    return {};
  }
  int64_t numel = 1;
  for (int64_t s : sizes) {
    if (s < 0 || (s > 0 && numel > (int64_t{1} << 40) / s)) {
      r.fail("tensor: bad size " + std::to_string(s));
      return {};
    }
    numel *= s;
  }
  if (nbytes != static_cast<uint64_t>(numel) * c10::elementSize(*type)) {
    r.fail("tensor: " + std::to_string(nbytes) + " bytes for " + std::to_string(numel) + " elements");
    return {};
  }
  const uint8_t* bytes = r.take(nbytes, "tensor values");
  if (!bytes) return {};
  at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(*type));
  if (nbytes > 0) std::memcpy(t.data_ptr(), bytes, nbytes);
  return t;
}

void put_tensors(bytes::Writer<std::string>& w, const std::vector<at::Tensor>& ts) {
  w.u64(ts.size());
  for (const auto& t : ts) put_tensor(w, t);
}

std::vector<at::Tensor> get_tensors(bytes::Reader& r) {
  const uint64_t n = r.u64("tensor count");
  std::vector<at::Tensor> out;
  if (n > r.remaining()) {  // every tensor takes at least one byte
    r.fail("tensor count " + std::to_string(n) + " exceeds the bytes left");
    return out;
  }
  for (uint64_t i = 0; i < n && r.ok(); ++i) out.push_back(get_tensor(r));
  return out;
}

void put_named_state(bytes::Writer<std::string>& w, const NamedState& s) {
  w.u64(s.entries().size());
  for (const NamedState::Entry& e : s.entries()) {
    w.str(e.name);
    w.u8(static_cast<uint8_t>(e.kind));
    switch (e.kind) {
      case NamedState::Kind::kInteger: w.i64(e.integer); break;
      case NamedState::Kind::kReal: w.f64(e.real); break;
      case NamedState::Kind::kTensor: put_tensor(w, e.tensor); break;
    }
  }
}

void get_named_state(bytes::Reader& r, NamedState& s) {
  s = NamedState();
  const uint64_t n = r.u64("entry count");
  if (n > r.remaining() / 10) {  // every entry takes at least 10 bytes
    r.fail("entry count " + std::to_string(n) + " exceeds the bytes left");
    return;
  }
  std::set<std::string> names;
  for (uint64_t i = 0; i < n && r.ok(); ++i) {
    NamedState::Entry e;
    e.name = r.str("entry name");
    const uint8_t kind = r.u8("entry kind");
    if (!r.ok()) return;
    if (!names.insert(e.name).second) return r.fail("entry '" + e.name + "' twice");
    switch (kind) {
      case 1: e.integer = r.i64("integer"); break;
      case 2: e.real = r.f64("real"); break;
      case 3: e.tensor = get_tensor(r); break;
      default: return r.fail("entry '" + e.name + "' of unknown kind " + std::to_string(kind));
    }
    e.kind = static_cast<NamedState::Kind>(kind);
    s.entries().push_back(std::move(e));
  }
}

}  // namespace atl::core
