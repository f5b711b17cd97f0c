#include "compression/codec.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "compression/frame.h"
#include "compression/sparse.h"
#include "compression/stage_ops.h"

namespace atl::compression {

namespace {

void check_elements(int64_t n, const void* p) {
  if (n < 0 || n > kMaxElements) {
    throw std::invalid_argument("a frame holds 0.." + std::to_string(kMaxElements) +
                                " elements, got " + std::to_string(n));
  }
  if (n > 0 && p == nullptr) throw std::invalid_argument("null buffer");
}

size_t header_bytes(const Chain& chain) {
  size_t bytes = kFramePrefixBytes + 8 + 1 + 8 + 8 + 8 + 8;  // one dimension
  for (int i = 0; i < chain.size; ++i) bytes += stage_wire_bytes(chain.stages[i].id);
  return bytes;
}

}  // namespace

size_t max_frame_size(const Chain& chain, int64_t n) {
  check_elements(n, &chain);  // only the range matters here
  return header_bytes(chain) + payload_bounds(chain, n).max_payload;
}

void encode_frame(const Chain& chain, const float* x, int64_t n, uint64_t seed,
                  std::vector<uint8_t>& out) {
  check_elements(n, x);
  if (Status st = validate_chain(chain.stages.data(), static_cast<size_t>(chain.size)); !st.is_ok()) {
    throw std::invalid_argument("encode_frame: " + st.message());
  }
  const StageConfig* transform = chain.slot(Slot::kTransform);
  const StageConfig* sparse = chain.slot(Slot::kSparsify);
  const StageConfig* quantize = chain.slot(Slot::kQuantize);
  const StageConfig* lossless = chain.slot(Slot::kLossless);

  FrameHeader h;
  h.chain = chain;
  h.elements = static_cast<uint64_t>(n);
  h.ndim = 1;
  h.dims[0] = static_cast<uint64_t>(n);
  h.seed = seed;
  const size_t start = begin_frame(h, out);

  // Slot 1: transform.
  std::vector<float> coeffs;
  const float* src = x;
  if (transform) {
    coeffs.resize(static_cast<size_t>(n));
    stage_ops(transform->id).forward(x, n, *transform, coeffs.data());
    src = coeffs.data();
  }
  // Slot 2: sparsify (indices ascending, values gathered).
  std::vector<uint32_t> idx;
  std::vector<float> kept;
  const float* values = src;
  int64_t m = n;
  if (sparse) {
    m = kept_count(*sparse, n);
    idx.resize(static_cast<size_t>(m));
    stage_ops(sparse->id).select(src, n, m, seed, idx.data());
    kept.resize(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) kept[i] = src[idx[i]];
    values = kept.data();
  }
  // Slot 3: serialise indices and values, into the frame or into zstd's input.
  std::vector<uint8_t> inner;
  std::vector<uint8_t>& dst = lossless ? inner : out;
  const bool indexed = sparse && stage_ops(sparse->id).sends_indices;
  const size_t ib = indexed ? varint_index_bytes(idx.data(), m) : 0;
  const size_t vb = value_bytes(chain, m);
  const size_t at = dst.size();
  dst.resize(at + ib + vb);
  if (indexed) encode_varint_indices(idx.data(), m, dst.data() + at);
  if (quantize) {
    stage_ops(quantize->id).encode(values, m, *quantize, seed, dst.data() + at + ib);
  } else if (m > 0) {
    std::memcpy(dst.data() + at + ib, values, vb);  // little-endian host (frame.cpp)
  }
  // Slot 4: lossless.
  if (lossless) stage_ops(lossless->id).compress(inner.data(), inner.size(), *lossless, out);
  finish_frame(out, start);
}

Status decode_frame(const Chain& chain, const uint8_t* bytes, size_t size, float* out, int64_t n) {
  check_elements(n, out);
  FrameView v;
  if (Status st = parse_frame(bytes, size, &v); !st.is_ok()) return st;
  if (v.header.chain != chain) {
    return corrupt("frame was encoded with '" + describe_chain(v.header.chain) +
                   "', this pipeline is '" + describe_chain(chain) + "'");
  }
  if (v.header.elements != static_cast<uint64_t>(n)) {
    return corrupt("frame holds " + std::to_string(v.header.elements) + " elements, the output has " +
                   std::to_string(n));
  }
  const StageConfig* transform = chain.slot(Slot::kTransform);
  const StageConfig* sparse = chain.slot(Slot::kSparsify);
  const StageConfig* quantize = chain.slot(Slot::kQuantize);
  const StageConfig* lossless = chain.slot(Slot::kLossless);
  const PayloadBounds b = payload_bounds(chain, n);

  // Slot 4: undo zstd into a buffer bounded by what the chain allows for n.
  const uint8_t* inner = v.payload;
  size_t inner_size = v.header.payload_size;
  std::vector<uint8_t> scratch;
  if (lossless) {
    if (Status st = stage_ops(lossless->id).decompress(inner, inner_size, b.min_inner, b.max_inner, scratch);
        !st.is_ok()) {
      return st;
    }
    inner = scratch.data();
    inner_size = scratch.size();
  }
  if (inner_size < b.min_inner || inner_size > b.max_inner) {
    return corrupt("payload of " + std::to_string(inner_size) + " bytes impossible for " +
                   describe_chain(chain) + " of " + std::to_string(n) + " elements");
  }
  // Slot 2 positions, validated before anything is written to out.
  const int64_t m = b.values;
  const size_t vb = value_bytes(chain, m);
  const size_t ib = inner_size - vb;  // >= 0: min_inner >= vb
  std::vector<uint32_t> idx;
  if (sparse) {
    idx.resize(static_cast<size_t>(m));
    if (stage_ops(sparse->id).sends_indices) {
      if (Status st = decode_varint_indices(inner, ib, m, n, idx.data()); !st.is_ok()) return st;
    } else {  // drawn again from the frame seed (the values are not needed)
      stage_ops(sparse->id).select(nullptr, n, m, v.header.seed, idx.data());
    }
  }
  // Slot 3: values into out[0..m).
  if (quantize) {
    if (Status st = stage_ops(quantize->id).decode(inner + ib, vb, m, *quantize, out); !st.is_ok()) {
      return corrupt(std::string(stage_name(quantize->id)) + " values: " + st.message());
    }
  } else if (m > 0) {
    std::memcpy(out, inner + ib, vb);
  }
  if (sparse) scatter_values(out, idx.data(), m, n, out);
  // Slot 1.
  if (transform) stage_ops(transform->id).inverse(out, n, *transform, out);
  return Status::ok();
}

}  // namespace atl::compression
