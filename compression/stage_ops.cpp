#include "compression/stage_ops.h"

#include <zstd.h>

#include <stdexcept>
#include <string>

#include "compression/dct.h"
#include "compression/lut2.h"
#include "compression/quantize.h"
#include "compression/sparse.h"
#include "compression/zstd_stage.h"

namespace atl::compression {
namespace {

void dct_fwd(const float* x, int64_t n, const StageConfig& st, float* out) { dct_forward(x, n, st.chunk, out); }
void dct_inv(const float* in, int64_t n, const StageConfig& st, float* out) { dct_inverse(in, n, st.chunk, out); }

void topk_select(const float* src, int64_t n, int64_t m, uint64_t, uint32_t* idx) { topk_indices(src, n, m, idx); }
void randk_select(const float*, int64_t n, int64_t m, uint64_t seed, uint32_t* idx) { randk_indices(seed, n, m, idx); }

// The quantizers of compression/quantize.h, one row per format.
template <StageId F>
size_t q_bytes(int64_t m, const StageConfig& st) {
  return quant::encoded_size(F, m, st.block);
}
template <StageId F>
void q_encode(const float* in, int64_t m, const StageConfig& st, uint64_t seed, uint8_t* out) {
  quant::encode(F, in, m, st.block, st.rounding, seed, out);
}
template <StageId F>
Status q_decode(const uint8_t* in, size_t size, int64_t m, const StageConfig& st, float* out) {
  return quant::decode(F, in, size, m, st.block, out);
}
template <StageId F>
StageOps quantizer() {
  StageOps o{F};
  o.value_bytes = q_bytes<F>;
  o.encode = q_encode<F>;
  o.decode = q_decode<F>;
  return o;
}

void zstd_compress(const uint8_t* in, size_t size, const StageConfig& st, std::vector<uint8_t>& out) {
  zstd_append(in, size, st.level, out);
}
size_t zstd_bound(size_t size) { return ZSTD_compressBound(size); }

std::vector<StageOps> build() {
  StageOps dct{StageId::kDct};
  dct.forward = dct_fwd;
  dct.inverse = dct_inv;
  StageOps topk{StageId::kTopK};
  topk.select = topk_select;
  topk.sends_indices = true;
  StageOps randk{StageId::kRandK};
  randk.select = randk_select;
  StageOps zstd{StageId::kZstd};
  zstd.compress = zstd_compress;
  zstd.decompress = zstd_decode_bounded;
  zstd.compress_bound = zstd_bound;
  return {dct,
          topk,
          randk,
          quantizer<StageId::kFp16>(),
          quantizer<StageId::kBf16>(),
          quantizer<StageId::kInt8>(),
          quantizer<StageId::kInt4>(),
          quantizer<StageId::kFp4>(),
          quantizer<StageId::kFp8>(),
          zstd,
          lut2::stage()};
}

}  // namespace

const std::vector<StageOps>& stage_ops_table() {
  static const std::vector<StageOps> table = build();
  return table;
}

const StageOps& stage_ops(StageId id) {
  for (const auto& o : stage_ops_table())
    if (o.id == id) return o;
  throw std::invalid_argument("unknown stage id " + std::to_string(static_cast<int>(id)));
}

}  // namespace atl::compression
