// Codec throughput (Google Benchmark): encode and decode of one 64 MB fp32 buffer (16M
// Gaussian values) per codec, on one thread, next to a memcpy of the same buffer in the same
// run. bytes_per_second is always fp32 *input* bytes (n * 4), so every row compares with the
// memcpy row directly; the `ratio` counter is encoded bytes / input bytes.
//
// Adding a codec = one entry in codecs(): a name, an encode that fills a byte vector and a
// decode back into floats. Run a subset with --benchmark_filter=int4, and shorten a run with
// --benchmark_min_time=0.2.
#include <benchmark/benchmark.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "compression/chain.h"
#include "compression/codec.h"
#include "compression/quantize.h"

namespace {

using atl::Status;
using atl::compression::Rounding;
using atl::compression::StageId;

constexpr int64_t kValues = int64_t{1} << 24;  // 64 MB of fp32

struct Codec {
  std::string name;
  // Encodes in[0..n) into out (resized as needed; capacity is reused across calls).
  std::function<void(const float* in, int64_t n, std::vector<uint8_t>& out)> encode;
  // Decodes out[0..n) from size bytes.
  std::function<Status(const uint8_t* in, size_t size, int64_t n, float* out)> decode;
};

Codec quantizer(const std::string& name, StageId id, int64_t block, Rounding rounding) {
  namespace q = atl::compression::quant;
  return {name,
          [=](const float* in, int64_t n, std::vector<uint8_t>& out) {
            out.resize(q::encoded_size(id, n, block));
            q::encode(id, in, n, block, rounding, /*seed=*/1, out.data());
          },
          [=](const uint8_t* in, size_t size, int64_t n, float* out) {
            return q::decode(id, in, size, n, block, out);
          }};
}

// A whole pipeline through the frame codec (compression/codec.h): header, checksum and every
// stage, exactly what Pipeline::encode/decode run minus the at::Tensor wrapper.
Codec pipeline(const std::string& name, const std::vector<atl::compression::StageConfig>& stages) {
  namespace c = atl::compression;
  const c::Chain chain = *c::make_chain(stages);
  return {name,
          [=](const float* in, int64_t n, std::vector<uint8_t>& out) {
            out.clear();
            c::encode_frame(chain, in, n, /*seed=*/1, out);
          },
          [=](const uint8_t* in, size_t size, int64_t n, float* out) {
            return c::decode_frame(chain, in, size, out, n);
          }};
}

atl::compression::StageConfig stage(StageId id, double fraction = 0.0, int64_t block = 128) {
  atl::compression::StageConfig s;
  s.id = id;
  s.fraction = fraction;
  s.block = block;
  return s;
}

// Every benchmarked codec, in report order.
std::vector<Codec> codecs() {
  const Rounding kNear = Rounding::kNearest, kSr = Rounding::kStochastic;
  return {
      quantizer("fp16", StageId::kFp16, 1, kNear),
      quantizer("bf16", StageId::kBf16, 1, kNear),
      quantizer("int8/b128", StageId::kInt8, 128, kNear),
      quantizer("int4/b128", StageId::kInt4, 128, kNear),
      quantizer("fp8/b128", StageId::kFp8, 128, kNear),
      quantizer("fp4/b128", StageId::kFp4, 128, kNear),
      quantizer("int8/b128/sr", StageId::kInt8, 128, kSr),
      quantizer("int4/b128/sr", StageId::kInt4, 128, kSr),
      quantizer("fp8/b128/sr", StageId::kFp8, 128, kSr),
      quantizer("fp4/b128/sr", StageId::kFp4, 128, kSr),
      // Frames: the other stages alone, and full pipelines.
      pipeline("frame/fp32", {}),
      pipeline("frame/topk0.01", {stage(StageId::kTopK, 0.01)}),
      pipeline("frame/randk0.01", {stage(StageId::kRandK, 0.01)}),
      pipeline("frame/dct64", {stage(StageId::kDct)}),
      pipeline("frame/zstd3", {stage(StageId::kZstd)}),
      pipeline("frame/int4+zstd3", {stage(StageId::kInt4), stage(StageId::kZstd)}),
      pipeline("frame/fp4+zstd3", {stage(StageId::kFp4), stage(StageId::kZstd)}),
      pipeline("frame/topk0.01+int8+zstd3",
               {stage(StageId::kTopK, 0.01), stage(StageId::kInt8), stage(StageId::kZstd)}),
      pipeline("frame/dct64+topk0.01+fp8",
               {stage(StageId::kDct), stage(StageId::kTopK, 0.01), stage(StageId::kFp8)}),
  };
}

// The shared 64 MB input and output buffers, touched once before any timing.
struct Buffers {
  std::vector<float> input, output;
  std::vector<uint8_t> encoded;
  Buffers() : input(kValues), output(kValues) {
    std::mt19937 rng(1);
    std::normal_distribution<float> gauss(0.0f, 1e-3f);  // pseudo-gradient-like magnitudes
    for (float& v : input) v = gauss(rng);
  }
};

Buffers& buffers() {
  static Buffers b;
  return b;
}

void set_throughput(benchmark::State& state) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kValues *
                          static_cast<int64_t>(sizeof(float)));
}

void bm_memcpy(benchmark::State& state) {
  Buffers& b = buffers();
  for (auto _ : state) {
    std::memcpy(b.output.data(), b.input.data(), kValues * sizeof(float));
    benchmark::ClobberMemory();
  }
  set_throughput(state);
}

void bm_encode(benchmark::State& state, const Codec& c) {
  Buffers& b = buffers();
  c.encode(b.input.data(), kValues, b.encoded);  // size and fault in the output
  for (auto _ : state) {
    c.encode(b.input.data(), kValues, b.encoded);
    benchmark::ClobberMemory();
  }
  set_throughput(state);
  state.counters["ratio"] =
      static_cast<double>(b.encoded.size()) / (static_cast<double>(kValues) * sizeof(float));
}

void bm_decode(benchmark::State& state, const Codec& c) {
  Buffers& b = buffers();
  c.encode(b.input.data(), kValues, b.encoded);
  for (auto _ : state) {
    const Status st = c.decode(b.encoded.data(), b.encoded.size(), kValues, b.output.data());
    if (!st.is_ok()) {
      state.SkipWithError(st.to_string().c_str());
      break;
    }
    benchmark::ClobberMemory();
  }
  set_throughput(state);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RegisterBenchmark("memcpy", bm_memcpy)->Unit(benchmark::kMillisecond);
  static const std::vector<Codec> table = codecs();
  for (const Codec& c : table) {
    benchmark::RegisterBenchmark(("encode/" + c.name).c_str(),
                                 [&c](benchmark::State& s) { bm_encode(s, c); })
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("decode/" + c.name).c_str(),
                                 [&c](benchmark::State& s) { bm_decode(s, c); })
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
