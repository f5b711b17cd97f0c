// Typed experiment configuration. YAML reaches these structs once, in config.cpp; every other
// component receives the struct it needs. Each field has its default and a one-line comment.
// Range rules live next to the parser (config.cpp) and are reported with file:line:key.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace atl::config {

struct RunConfig {
  std::string name = "run";     // run directory is <out_dir>/<name>
  uint64_t seed = 0;            // seeds data order, partitions, init, dropout, sampling
  std::string out_dir = "runs"; // parent of run directories
  int threads = 0;              // libtorch intra-op threads; 0 = all cores of this machine
  std::string device = "cpu";   // torch device string: "cpu", "cuda", "cuda:1"
  bool resume = false;          // allow writing into an existing run directory
};

struct ModelConfig {
  std::string name = "gpt";     // registry name: gpt | mlp
  // gpt
  int layers = 4;               // transformer blocks
  int heads = 4;                // attention heads (dim % heads == 0)
  int dim = 128;                // residual width
  int seq_len = 128;            // context length in tokens
  int vocab = 256;              // vocabulary size (256 for byte-level text)
  double dropout = 0.0;         // dropout on attention and residual paths
  bool tie_embeddings = true;   // share token embedding and output head
  // mlp
  std::vector<int> hidden = {200, 200};  // hidden layer widths (ReLU between)
  int classes = 0;              // output classes; 0 = from the data set
  int input_dim = 0;            // flat input size; 0 = from the data set
};

struct DataConfig {
  std::string kind = "text";    // text | tokens | idx | synthetic
  std::string path;             // text file, uint16 .bin tokens, or IDX images (train)
  std::string labels_path;      // idx: IDX labels for `path`
  std::string val_path;         // tokens/idx: separate validation file (optional)
  std::string val_labels_path;  // idx: IDX labels for `val_path`
  double val_fraction = 0.05;   // held out for validation when no val_path is given
  std::string partition = "iid";  // iid | contiguous | dirichlet | shards
  double dirichlet_alpha = 0.5; // dirichlet: concentration over labels (smaller = more skew)
  int shards_per_island = 2;    // shards: label-sorted shards per island (FedAvg paper: 2)
  // synthetic classification data (tests): examples x dim, classes
  int synthetic_examples = 2048;
  int synthetic_dim = 32;
  int synthetic_classes = 4;
};

struct TrainConfig {
  std::string optimizer = "adamw";  // adamw | sgd
  double lr = 1e-3;             // peak inner learning rate
  double min_lr_ratio = 0.1;    // cosine floor as a fraction of lr
  std::string schedule = "cosine";  // cosine | constant
  int64_t warmup_steps = 100;   // linear warmup from 0 over these inner steps
  double beta1 = 0.9;           // adamw
  double beta2 = 0.95;          // adamw
  double eps = 1e-8;            // adamw
  double weight_decay = 0.1;    // adamw: decoupled; sgd: L2
  double momentum = 0.0;        // sgd momentum (0 = plain SGD)
  double grad_clip = 1.0;       // max global grad norm; 0 = off
  int batch_size = 16;          // sequences (or examples) per micro-batch
  int grad_accum = 1;           // micro-batches per inner step
  int64_t steps = 1000;         // inner steps per island
  int64_t eval_every = 100;     // evaluate the global model every N inner steps (0 = end only)
  int eval_batches = 16;        // validation batches per evaluation (0 = whole split)
  int64_t log_every = 10;       // per-island training-loss records every N inner steps
};

struct IslandsConfig {
  int count = 4;                // number of islands (FedAvg: clients)
};

struct AlgorithmConfig {
  std::string name = "diloco";  // ddp | diloco | fedavg
  int64_t inner_steps = 50;     // diloco: H, inner steps per round
  std::string outer_optimizer = "nesterov";  // nesterov | sgd | adam
  double outer_lr = 0.7;        // outer learning rate
  double outer_momentum = 0.9;  // nesterov/sgd momentum
  double outer_beta1 = 0.9;     // adam
  double outer_beta2 = 0.999;   // adam
  double outer_eps = 1e-1;      // adam (DiLoCo: unstable below ~0.1)
  std::string weighting = "uniform";  // uniform | shard_size (weights n_i / sum n)
  // fedavg
  double client_fraction = 0.1; // C: fraction of clients sampled per round (at least one)
  int64_t rounds = 0;           // fedavg rounds (0 = derived: train.steps / local_steps)
  int64_t local_steps = 0;      // fedavg: inner steps per selected client per round
  int local_epochs = 1;         // fedavg: used when local_steps == 0: E passes over the shard
  bool error_feedback = true;   // lossy compression: carry each island's compression error
                                // into its next exchange (residual added before encoding)
};

// Real multi-process runs (`atoll coordinator`, `atoll island`, `atoll launch`).
struct TransportConfig {
  std::string kind = "zmq";     // zmq | gloo: the data plane among islands
  std::string collective = "ring";  // zmq all-reduce: ring (peer to peer) | star (via coordinator)
  std::string coordinator = "tcp://127.0.0.1:29500";  // coordinator's control endpoint
  std::string host = "127.0.0.1";   // address islands bind their data sockets on
  int base_port = 29510;        // island k listens on base_port + k
  int64_t heartbeat_ms = 500;   // island -> coordinator heartbeat period
  int64_t heartbeat_timeout_ms = 5000;  // silence after which an island is declared dead
  double bandwidth_mbps = 1000; // assumed link bandwidth for transfer timeouts (refined by
                                // observed throughput)
  double timeout_slack = 4.0;   // timeout = slack * (latency + bytes / bandwidth) + 1 s
  int64_t chunk_bytes = 1 << 20;  // large payloads travel in chunks of this size
  int max_in_flight = 8;        // chunks in flight per peer
  bool curve = false;           // CurveZMQ encryption + allow-list of island public keys
  std::string keys_dir = "keys";  // curve: <dir>/coordinator.key, <dir>/island-K.key, and
                                  // <dir>/allowed/ with the public keys allowed to join
};

// One stage of the outer-exchange compression pipeline (`compression:` list in YAML):
//   - {quantize: int4, block: 128, rounding: stochastic}   fp16|bf16|int8|int4|fp4|fp8
//   - {topk: 0.01}  {randk: 0.01}   a fraction in (0, 1), or an element count >= 1
//   - {dct: 64}                     chunked DCT-II, chunk length (default 64)
//   - {zstd: 3}                     lossless, level 1..19 (default 3)
// Stage order is checked when the pipeline is built (transform, sparsify, quantize, zstd).
struct CompressionStage {
  std::string op;               // quantize | topk | randk | dct | zstd
  std::string format;           // quantize: fp16 | bf16 | int8 | int4 | fp4 | fp8
  int64_t block = 128;          // quantize: elements per scale block
  std::string rounding = "nearest";  // quantize: nearest | stochastic
  double fraction = 0;          // topk/randk: fraction kept (when count == 0)
  int64_t count = 0;            // topk/randk: elements kept
  int64_t chunk = 64;           // dct: chunk length
  int level = 3;                // zstd: level
  bool operator==(const CompressionStage&) const = default;
};

struct Config {
  std::string source;           // file the config was read from ("" when built in code)
  RunConfig run;
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  IslandsConfig islands;
  AlgorithmConfig algorithm;
  std::vector<CompressionStage> compression;  // empty = raw fp32 on the wire
  TransportConfig transport;
  // Where each key that the text set came from, for messages about it later (e.g. a missing
  // data file in check_environment): "section.key" -> "FILE:LINE" or "--set section.key=v".
  // Filled by parse_config; keys left at their defaults are absent. Not written by to_yaml.
  std::map<std::string, std::string> origins;
};

// Reads `path`, applies `overrides` ("a.b=value", in order), validates everything.
// Throws atl::UserError with "FILE:LINE: key 'a.b': problem (did you mean 'a.c'?)".
// A file that cannot be read: "cannot read config file 'X': No such file or directory".
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// Same, from YAML text; `source_name` is used in messages and stored in Config::source.
// - Sections and keys are exactly the struct and field names above; a key that is absent
//   (or an empty file, or an empty section) keeps its default.
// - Unknown sections/keys, wrong types (1.5 or "4" for an integer, a list for a scalar),
//   duplicate keys, YAML syntax errors and out-of-range values are UserErrors, reported
//   with the 1-based line of the key. Integers are decimal ("010" is 10); booleans are
//   whatever yaml-cpp reads as one (true/false/yes/no/on/off).
// - Each override is "section.key=value", the value read as YAML (model.hidden=[64,64];
//   "run.name=" gives ""), applied after the file with the same checks; its errors start
//   with "--set section.key=value:" instead of FILE:LINE.
// - Cross-key rule checked after all overrides: model.dim % model.heads == 0.
// - algorithm.name and model.name are not checked here: their registries own the names.
// Pure function; safe to call from several threads.
Config parse_config(const std::string& yaml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides = {});

// Fully resolved config as YAML (every field, defaults included; doubles in the shortest
// form that reads back exactly; strings double-quoted). parse_config(to_yaml(c)) gives back c
// (except `source` and `origins`), and to_yaml of that is byte-identical.
std::string to_yaml(const Config& config);

// Checks what depends on the machine rather than the text, after parse_config:
// - data.kind text|tokens|idx needs data.path; idx also needs data.labels_path, and
//   data.val_labels_path when data.val_path is set;
// - every non-empty data.path / labels_path / val_path / val_labels_path must be a readable
//   regular file. Relative paths are relative to the current working directory.
// Throws atl::UserError "FILE:LINE: key 'data.path': file 'X' does not exist" (the place
// comes from Config::origins; the config's source name when the key was not set by text).
void check_environment(const Config& config);

}  // namespace atl::config
