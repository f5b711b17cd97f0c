// The one tensor codec of atoll: how a tensor is written into any byte format that holds one
// (checkpoint sections, the state hand-over to a joining island), on the byte cursor of
// src/base/bytes.h. Layout (docs/checkpoints.md "Tensors"): u8 defined (0: nothing follows);
// u8 dtype id from the frozen table below; u64 ndim and ndim i64 sizes; u64 byte count; the
// bytes of the contiguous CPU tensor.
//
// Dtype ids, frozen (never renumbered or reused; a new dtype appends an id):
//   1 float32, 2 float64, 3 int64, 4 uint8, 5 int32, 6 bfloat16, 7 float16.
// Reading is bounds-checked: a bad id, a negative or overflowing size, a byte count that does
// not match the shape or is not there fails the reader (bytes::Reader::ok() false, its error
// names the tensor field) and returns an undefined tensor. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "src/base/bytes.h"

namespace at {
class Tensor;
}
namespace atl {
class NamedState;
}
namespace c10 {
enum class ScalarType : int8_t;
}

namespace atl::core {

// The frozen id of a dtype, or nullopt for one atoll does not store.
std::optional<uint8_t> dtype_id(c10::ScalarType type);
std::optional<c10::ScalarType> dtype_of_id(uint8_t id);

// Throws (TORCH_CHECK) for a dtype without an id: a program error, not input.
void put_tensor(bytes::Writer<std::string>& w, const at::Tensor& t);
at::Tensor get_tensor(bytes::Reader& r);  // undefined (and r not ok()) on bad input
// A u64 count, then that many tensors.
void put_tensors(bytes::Writer<std::string>& w, const std::vector<at::Tensor>& ts);
std::vector<at::Tensor> get_tensors(bytes::Reader& r);  // r not ok() on bad input

// Named state (src/base/named_state.h; docs/checkpoints.md "Named state"): u64 entry count,
// then per entry str name, u8 kind (1 integer, 2 real, 3 tensor) and its value (i64, f64, or
// a tensor as above). Reading fails the reader on an unknown kind, a repeated name or a count
// the bytes cannot hold.
void put_named_state(bytes::Writer<std::string>& w, const NamedState& s);
void get_named_state(bytes::Reader& r, NamedState& s);  // r not ok() on bad input

// A tensor (or a u64-counted list of them, or named state) as a field of a symmetric layout (bytes::Out over
// a std::string, or bytes::In).
template <class Io, class T>
void tensor_field(Io& io, T& t) {
  if constexpr (Io::kReads) t = get_tensor(io.reader());
  else put_tensor(io.writer(), t);
}
template <class Io, class V>
void tensors_field(Io& io, V& ts) {
  if constexpr (Io::kReads) ts = get_tensors(io.reader());
  else put_tensors(io.writer(), ts);
}

template <class Io, class S>
void named_state_field(Io& io, S& s) {
  if constexpr (Io::kReads) get_named_state(io.reader(), s);
  else put_named_state(io.writer(), s);
}

}  // namespace atl::core
