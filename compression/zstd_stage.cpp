#include "compression/zstd_stage.h"

#include <zstd.h>

#include <memory>
#include <stdexcept>
#include <string>

namespace atl::compression {

namespace {
struct CCtxFree {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DCtxFree {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

ZSTD_CCtx* thread_cctx() {
  thread_local std::unique_ptr<ZSTD_CCtx, CCtxFree> ctx(ZSTD_createCCtx());
  if (!ctx) throw std::runtime_error("ZSTD_createCCtx failed");
  return ctx.get();
}

ZSTD_DCtx* thread_dctx() {
  thread_local std::unique_ptr<ZSTD_DCtx, DCtxFree> ctx(ZSTD_createDCtx());
  if (!ctx) throw std::runtime_error("ZSTD_createDCtx failed");
  return ctx.get();
}
}  // namespace

void zstd_append(const uint8_t* in, size_t size, int level, std::vector<uint8_t>& out) {
  const size_t at = out.size();
  out.resize(at + ZSTD_compressBound(size));
  const size_t got = ZSTD_compressCCtx(thread_cctx(), out.data() + at, out.size() - at, in, size, level);
  if (ZSTD_isError(got)) {
    out.resize(at);
    throw std::runtime_error(std::string("zstd compression failed: ") + ZSTD_getErrorName(got));
  }
  out.resize(at + got);
}

Status zstd_decode_bounded(const uint8_t* in, size_t size, size_t min_size, size_t max_size,
                           std::vector<uint8_t>& out) {
  const unsigned long long content = ZSTD_getFrameContentSize(in, size);
  if (content == ZSTD_CONTENTSIZE_ERROR) return corrupt("zstd payload: not a zstd frame");
  if (content == ZSTD_CONTENTSIZE_UNKNOWN) return corrupt("zstd payload: frame does not declare its content size");
  if (content < min_size || content > max_size) {
    return corrupt("zstd payload declares " + std::to_string(content) + " bytes; the chain allows " +
                   std::to_string(min_size) + ".." + std::to_string(max_size));
  }
  const size_t frame = ZSTD_findFrameCompressedSize(in, size);
  if (ZSTD_isError(frame)) return corrupt(std::string("zstd payload: ") + ZSTD_getErrorName(frame));
  if (frame != size) {
    return corrupt("zstd payload: " + std::to_string(size - frame) + " bytes after the zstd frame");
  }
  out.resize(static_cast<size_t>(content));
  const size_t got = ZSTD_decompressDCtx(thread_dctx(), out.data(), out.size(), in, size);
  if (ZSTD_isError(got)) return corrupt(std::string("zstd payload: ") + ZSTD_getErrorName(got));
  if (got != content) {
    return corrupt("zstd payload: decoded " + std::to_string(got) + " bytes, header declared " +
                   std::to_string(content));
  }
  return Status::ok();
}

}  // namespace atl::compression
