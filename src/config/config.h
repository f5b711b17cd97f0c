// Typed experiment configuration. YAML reaches these structs once, in config.cpp; every other
// component receives the struct it needs. Each field is declared once: its member with its
// default and a one-line comment, and its line in the struct's fields() (key, allowed values;
// src/base/fields.h), which config.cpp walks to parse, check and write. A component's own
// options live beside it (the `algorithm:` section is algorithms::AlgorithmOptions).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "algorithms/options.h"
#include "src/data/kinds.h"
#include "src/dipaco/config.h"
#include "transport/kinds.h"
#include "src/base/fields.h"

namespace atl::config {

struct RunConfig {
  std::string name = "run";     // run directory is <out_dir>/<name>
  uint64_t seed = 0;            // seeds data order, partitions, init, dropout, sampling
  std::string out_dir = "runs"; // parent of run directories
  int threads = 0;              // libtorch intra-op threads; 0 = all cores of this machine
  std::string device = "cpu";   // torch device string: "cpu", "cuda", "cuda:1"
  bool resume = false;          // allow writing into an existing run directory
  // A record that cannot be appended to metrics.jsonl (disk full, I/O error): "stop" ends
  // the run at once with one line and an error; "warn" says so once and goes on, dropping
  // the records that cannot be written (their count is in the end line and summary.json).
  // The file never ends in a torn line either way (docs/errors.md "Outputs").
  std::string metrics_on_failure = "stop";

  template <class V>
  void fields(V& v) {
    using namespace atl::fields;
    v.field("name", name);
    v.field("seed", seed);
    v.field("out_dir", out_dir);
    v.field("threads", threads, at_least(0));
    v.field("device", device);  // src/core/validate.cpp checks it exists here
    v.field("resume", resume);
    v.field("metrics_on_failure", metrics_on_failure, one_of({"stop", "warn"}));
  }
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
  // Warm start: every island (and the coordinator) starts from the parameters in this
  // runs/<name>/final_params.bin of an earlier run with the same model shape, instead of
  // the seeded initialisation. Only parameters: optimizer states and the step count start
  // fresh (the DiLoCo paper's "pre-trained then distributed" protocol).
  std::string init_from;
  // mlp
  std::vector<int> hidden = {200, 200};  // hidden layer widths (ReLU between)
  int classes = 0;              // output classes; 0 = from the data set
  int input_dim = 0;            // flat input size; 0 = from the data set

  template <class V>
  void fields(V& v) {
    using namespace atl::fields;
    v.field("name", name);  // the model specs check it (src/models/spec.cpp)
    v.field("layers", layers, at_least(1));
    v.field("heads", heads, at_least(1));
    v.field("dim", dim, at_least(1));
    v.field("seq_len", seq_len, at_least(1));
    v.field("vocab", vocab, at_least(1));
    v.field("dropout", dropout, closed_open(0, 1));
    v.field("tie_embeddings", tie_embeddings);
    v.field("init_from", init_from);
    v.field("hidden", hidden, at_least(1));
    v.field("classes", classes, at_least(0));
    v.field("input_dim", input_dim, at_least(0));
  }
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
  // idx/synthetic: standardise the features with the training split's mean and std (none |
  // global: one over all values | per_feature: one per pixel); written to
  // runs/<name>/normalization.json (src/data/normalize.h)
  std::string normalize = "none";
  // Language models: the first N tokens of every validation sequence are context only, and
  // the validation loss scores the tokens after them (docs/metrics.md "The loss window"), so
  // that a run of one model measures the loss a routed evaluation of paths does. -1: the
  // algorithm's default (the router's prefix when paths are routed), else 0 (every token).
  int loss_after = -1;

  template <class V>
  void fields(V& v) {
    using namespace atl::fields;
    v.field("kind", kind, one_of(data::data_kind_names()));
    v.field("path", path);
    v.field("labels_path", labels_path);
    v.field("val_path", val_path);
    v.field("val_labels_path", val_labels_path);
    v.field("val_fraction", val_fraction, open_open(0, 1));
    v.field("partition", partition, one_of({"iid", "contiguous", "dirichlet", "shards"}));
    v.field("dirichlet_alpha", dirichlet_alpha, above(0));
    v.field("shards_per_island", shards_per_island, at_least(1));
    v.field("synthetic_examples", synthetic_examples, at_least(1));
    v.field("synthetic_dim", synthetic_dim, at_least(1));
    v.field("synthetic_classes", synthetic_classes, at_least(2));
    v.field("normalize", normalize, one_of({"none", "global", "per_feature"}));
    v.field("loss_after", loss_after, at_least(-1));
  }
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
  double target_loss = 0;       // summary: time/steps/bytes to reach this validation loss
                                // (0 = not tracked)

  template <class V>
  void fields(V& v) {
    using namespace atl::fields;
    v.field("optimizer", optimizer, one_of({"adamw", "sgd"}));
    v.field("lr", lr, above(0));
    v.field("min_lr_ratio", min_lr_ratio, closed(0, 1));
    v.field("schedule", schedule, one_of({"cosine", "constant"}));
    v.field("warmup_steps", warmup_steps, at_least(0));
    v.field("beta1", beta1, closed_open(0, 1));
    v.field("beta2", beta2, closed_open(0, 1));
    v.field("eps", eps, above(0));
    v.field("weight_decay", weight_decay, at_least(0));
    v.field("momentum", momentum, closed_open(0, 1));
    v.field("grad_clip", grad_clip, at_least(0));
    v.field("batch_size", batch_size, at_least(1));
    v.field("grad_accum", grad_accum, at_least(1));
    v.field("steps", steps, at_least(1));
    v.field("eval_every", eval_every, at_least(0));
    v.field("eval_batches", eval_batches, at_least(0));
    v.field("log_every", log_every, at_least(1));
    v.field("target_loss", target_loss, at_least(0));
  }
};

// One entry of `islands.events:` (simulator: membership changes on the virtual clock).
// Exactly one action and one trigger per event, e.g.
//   - {kill: 2, at_step: 100}            island 2 dies after its 100th inner step
//   - {rejoin: 2, at_time_s: 300}        island 2 comes back (from the current global model)
//   - {add: 1, at_time_s: 120}           one new island joins (ids count, count+1, ...)
//   - {partition: [us, eu], at_time_s: 50, duration_s: 30}   no traffic between two regions
struct IslandEvent {
  int kill = -1;                // island id to kill
  int rejoin = -1;              // island id that comes back
  int add = 0;                  // number of new islands that join
  std::vector<std::string> partition;  // two region names (network.regions) cut apart
  int64_t at_step = -1;         // trigger: the island's inner step (kill only; -1 = unset)
  double at_time_s = -1;        // trigger: virtual time in seconds (-1 = unset)
  double duration_s = 0;        // partition: how long the cut lasts
  bool operator==(const IslandEvent&) const = default;

  template <class V>
  void fields(V& v) {
    using namespace atl::fields;
    v.field("kill", kill, at_least(0));
    v.field("rejoin", rejoin, at_least(0));
    v.field("add", add, at_least(1));
    v.field("partition", partition);
    v.field("at_step", at_step, at_least(0));
    v.field("at_time_s", at_time_s, at_least(0));
    v.field("duration_s", duration_s, above(0));
  }
};

// A setting each island may have its own of: one value for every island (`ranks: 2`) or one
// per island (`ranks: [2, 4]`; islands added by events included).
struct PerIsland {
  std::vector<int> values{1};
  int of(int island) const {
    return values.size() == 1 ? values.front() : values.at(static_cast<size_t>(island));
  }
  int max() const { return *std::max_element(values.begin(), values.end()); }
  bool operator==(const PerIsland&) const = default;
};

struct IslandsConfig {
  int count = 4;                // number of islands (FedAvg: clients)
  std::vector<IslandEvent> events;  // simulator: kills, rejoins, additions, partitions
  // Ranks (processes) of each island: data parallelism inside it over c10d, each rank
  // taking train.batch_size / ranks rows of every batch (docs/ranks.md).
  PerIsland ranks;
  // With ranks > 1: rank r of every island exchanges shard r of each outer all-reduce, and
  // the island's ranks then share the shards (docs/ranks.md "The outer exchange, sharded").
  // Off: rank 0 exchanges the whole buffer for its island.
  bool shard_exchange = false;

  template <class V>
  void fields(V& v) {
    using namespace atl::fields;
    v.field("count", count, at_least(1));
    v.field("events", events);
    v.field("ranks", ranks, at_least(1));
    v.field("shard_exchange", shard_exchange);
  }
};

// Simulator compute model: virtual seconds per inner step of each island.
//   step_time = base * (1 / speed_i) * straggler factor * jitter
// where base = step_time_s, or (when 0) the FLOPs of one inner step (model FLOPs per
// token or example x batch x grad_accum) / (flops * mfu).
struct ComputeConfig {
  double step_time_s = 0;       // virtual seconds per inner step at speed 1; 0 = from flops
  double flops = 1e14;          // device peak FLOP/s used when step_time_s == 0
  double mfu = 0.4;             // fraction of peak achieved
  std::vector<double> speeds;   // per-island speed factors (2 = twice as fast); empty = all 1
  double jitter = 0;            // relative std-dev of each step's time (log-normal, seeded)
  double straggler_prob = 0;    // per-step chance an island starts a slow episode
  double straggler_factor = 3;  // step time multiplier during an episode
  int64_t straggler_steps = 20; // inner steps an episode lasts
  // An island of R > 1 ranks (islands.ranks) computes a step in step_time / (R * rank_scaling),
  // then all-reduces the gradient over network.intra_island_* (docs/ranks.md).
  double rank_scaling = 1.0;

  template <class V>
  void fields(V& v) {
    using namespace atl::fields;
    v.field("step_time_s", step_time_s, at_least(0));
    v.field("flops", flops, above(0));
    v.field("mfu", mfu, open_closed(0, 1));
    v.field("speeds", speeds, above(0));
    v.field("jitter", jitter, closed(0, 2));
    v.field("straggler_prob", straggler_prob, closed(0, 1));
    v.field("straggler_factor", straggler_factor, at_least(1));
    v.field("straggler_steps", straggler_steps, at_least(1));
    v.field("rank_scaling", rank_scaling, open_closed(0, 1));
  }
};

// A link between two regions (`network.links:`): overrides the defaults for that pair.
//   - {between: [us, eu], latency_ms: 40, bandwidth_mbps: 1000}
struct NetworkLink {
  std::vector<std::string> between;  // two region names (order does not matter)
  double latency_ms = -1;       // one-way latency; -1 = network.latency_ms
  double bandwidth_mbps = -1;   // capacity of the path between the regions; -1 = no cap
  double jitter_ms = -1;        // -1 = network.jitter_ms
  double loss = -1;             // packet loss probability; -1 = network.loss
  bool operator==(const NetworkLink&) const = default;

  template <class V>
  void fields(V& v) {
    using namespace atl::fields;
    v.field("between", between);
    v.field("latency_ms", latency_ms, at_least(0));
    v.field("bandwidth_mbps", bandwidth_mbps, above(0));
    v.field("jitter_ms", jitter_ms, at_least(0));
    v.field("loss", loss, closed_open(0, 1));
  }
};

// Network model (simulator) and WAN emulation profile (`atoll relay`, `launch --emulate-wan`).
// A transfer of B bytes from island a to b takes
//   latency(a,b) + jitter + B*8 / min(up_a, down_b, link(a,b)) + losses * rtt(a,b)
// where losses ~ Poisson(packets * loss) (each lost packet costs one round trip).
struct NetworkConfig {
  double bandwidth_mbps = 10000;  // each island's access link, per direction
  double up_mbps = 0;           // uplink when asymmetric; 0 = bandwidth_mbps
  double down_mbps = 0;         // downlink when asymmetric; 0 = bandwidth_mbps
  double latency_ms = 0.5;      // one-way latency between islands (same region)
  double jitter_ms = 0;         // uniform extra latency in [0, jitter_ms] per message
  double loss = 0;              // packet loss probability (1460-byte packets)
  std::vector<std::string> regions;  // region name of each island (index = id); empty = one
  std::vector<NetworkLink> links;    // region pairs with their own latency/bandwidth
  std::string server_region;    // where the coordinator / server role sits; "" = island 0's
  // The fabric between the ranks of one island (islands.ranks > 1): its ring all-reduce of the
  // gradient after each step (docs/ranks.md).
  double intra_island_mbps = 100000;
  double intra_island_latency_ms = 0.01;
  // With islands.shard_exchange: each rank of an island has an access link of its own, as
  // the island's (a NIC per GPU), so the shards of an exchange do not share one (docs/ranks.md).
  bool rank_links = false;

  template <class V>
  void fields(V& v) {
    using namespace atl::fields;
    v.field("bandwidth_mbps", bandwidth_mbps, above(0));
    v.field("up_mbps", up_mbps, at_least(0));
    v.field("down_mbps", down_mbps, at_least(0));
    v.field("latency_ms", latency_ms, at_least(0));
    v.field("jitter_ms", jitter_ms, at_least(0));
    v.field("loss", loss, closed_open(0, 1));
    v.field("regions", regions);
    v.field("intra_island_mbps", intra_island_mbps, above(0));
    v.field("intra_island_latency_ms", intra_island_latency_ms, at_least(0));
    v.field("rank_links", rank_links);
    v.field("links", links);
    v.field("server_region", server_region);
  }
};

// Real multi-process runs (`atoll coordinator`, `atoll island`, `atoll launch`).
struct TransportConfig {
  std::string kind = "zmq";     // the data plane among islands: a row of transport/kinds.h (zmq | gloo)
  std::string collective = "ring";  // zmq all-reduce: ring (peer to peer) | star (via coordinator)
  std::string coordinator = "tcp://127.0.0.1:29500";  // coordinator's control endpoint
  std::string host = "127.0.0.1";   // address islands bind their data sockets on; "*": every
                                    // interface, reached at this node's name (docs/slurm.md)
  int base_port = 29510;        // island k listens on base_port + k
  int rank_port = 0;            // island k's ranks meet at rank_port + k on its rank 0 (0: base_port + 400)
  int64_t heartbeat_ms = 500;   // island -> coordinator heartbeat period
  int64_t heartbeat_timeout_ms = 5000;  // silence after which an island is declared dead
  // The run starts once every island has joined, or, when join_timeout_s has passed (or
  // the islands still missing were refused by the CURVE allow-list), with at least this
  // many; otherwise it fails naming the missing islands. 0 = islands.count. Islands that
  // join after the start come in as rejoiners do (zmq, non-server algorithms).
  int min_islands = 0;
  // Seconds the coordinator waits, from its start, for the islands to join (an island
  // process also gives up reaching the coordinator after this long).
  double join_timeout_s = 120;
  int max_rejoins = 3;          // an island declared dead while cut off that comes back joins
                                // the run again with a state hand-over, at most this often
                                // (0: it fails instead); zmq, non-server algorithms
  double bandwidth_mbps = 1000; // assumed link bandwidth for transfer timeouts (refined by
                                // observed throughput)
  double timeout_slack = 4.0;   // timeout = slack * (latency + bytes / bandwidth) + 1 s
  int64_t chunk_bytes = 1 << 20;  // large payloads travel in chunks of this size
  int max_in_flight = 8;        // chunks in flight per peer
  bool curve = false;           // CurveZMQ encryption + allow-list of island public keys
  std::string keys_dir = "keys";  // curve: <dir>/coordinator.key, <dir>/island-K.key, and
                                  // <dir>/allowed/ with the public keys allowed to join

  template <class V>
  void fields(V& v) {
    using namespace atl::fields;
    v.field("kind", kind, one_of(transport::transport_kind_names()));
    v.field("collective", collective, one_of({"ring", "star"}));
    v.field("coordinator", coordinator);
    v.field("host", host);
    v.field("base_port", base_port, closed(1, 65535));
    v.field("rank_port", rank_port, closed(0, 65535));
    v.field("heartbeat_ms", heartbeat_ms, at_least(1));
    v.field("heartbeat_timeout_ms", heartbeat_timeout_ms, at_least(1));
    v.field("min_islands", min_islands, at_least(0));
    v.field("join_timeout_s", join_timeout_s, open_closed(0, 1e6));
    v.field("max_rejoins", max_rejoins, at_least(0));
    v.field("bandwidth_mbps", bandwidth_mbps, above(0));
    v.field("timeout_slack", timeout_slack, at_least(1));
    v.field("chunk_bytes", chunk_bytes, at_least(1024));
    v.field("max_in_flight", max_in_flight, at_least(1));
    v.field("curve", curve);
    v.field("keys_dir", keys_dir);
  }
};

// One stage of the outer-exchange compression pipeline (`compression:` list in YAML); the
// stages and their names are compression's registry (compression/stage.h, kStageInfo):
//   - {quantize: int4, block: 128, rounding: stochastic}   any quantizer of the registry
//   - {topk: 0.01}  {randk: 0.01}   a fraction in (0, 1), or an element count >= 1
//   - {dct: 64}                     chunked DCT-II, chunk length (default 64)
//   - {zstd: 3}                     lossless, level 1..19 (default 3)
// Stage order is checked when the pipeline is built (transform, sparsify, quantize, zstd).
struct CompressionStage {
  std::string op;               // "quantize", or the name of a stage that is not a quantizer
  std::string format;           // quantize: the quantizer's name (int8, fp8, ...)
  int64_t block = 128;          // quantize: elements per scale block
  std::string rounding = "nearest";  // quantize: nearest | stochastic
  double fraction = 0;          // topk/randk: fraction kept (when count == 0)
  int64_t count = 0;            // topk/randk: elements kept
  int64_t chunk = 64;           // dct: chunk length
  int level = 3;                // zstd: level
  bool operator==(const CompressionStage&) const = default;
};

// Where the processes of a real run live (`atoll launch` prints or, with --ssh, runs the
// per-host commands). A host is an ssh destination ("user@host" or "host"); "" = this machine.
// Every host has the repository at `workdir` with the config at the same relative path.
struct HostsConfig {
  std::string coordinator;          // host of `atoll coordinator`
  std::vector<std::string> islands; // host of island K (index K); empty = all on this machine
  std::string workdir = "atoll";    // checkout on each host (relative to the ssh login dir)
  std::string binary = "build/atoll";  // the atoll executable inside workdir

  template <class V>
  void fields(V& v) {
    using namespace atl::fields;
    v.field("coordinator", coordinator);
    v.field("islands", islands);
    v.field("workdir", workdir);
    v.field("binary", binary);
  }
};

// `atoll slurm CONFIG` (docs/slurm.md): the sbatch options of the run's batch scripts.
struct SlurmConfig {
  std::string partition;              // "" = the cluster's default
  std::string account;                // "" = the user's default
  std::string time;                   // "" = the partition's limit; else sbatch's forms (HH:MM:SS, D-HH:MM:SS)
  std::vector<std::string> sbatch;    // more sbatch options, one per #SBATCH line: ["--qos=high"]
  std::string binary = "build/atoll";  // the atoll executable, from the submit directory
  // A run across several clusters runs one `atoll slurm` per site: the islands this site's
  // array runs (empty: all), and whether this site also runs the coordinator.
  std::vector<int> islands;
  bool coordinator = true;
  // With a time limit (`time`) and checkpoints on: Slurm signals the islands this long before
  // it, and they checkpoint (#SBATCH --signal=USR1@N; docs/checkpoints.md). 0: no signal.
  int signal_before_s = 120;

  template <class V>
  void fields(V& v) {
    using namespace atl::fields;
    v.field("partition", partition);
    v.field("account", account);
    v.field("time", time);
    v.field("sbatch", sbatch);
    v.field("binary", binary);
    v.field("islands", islands, at_least(0));
    v.field("coordinator", coordinator);
    v.field("signal_before_s", signal_before_s, closed(0, 65535));
  }
};

// Checkpoints of a run (docs/checkpoints.md): written to `dir` every `every` inner steps,
// the newest `keep` kept; `atoll simulate --resume` (run.resume) continues from the newest.
struct CheckpointConfig {
  int64_t every = 0;            // inner steps between checkpoints; 0 = no checkpoints
  int keep = 3;                 // how many of the newest checkpoints are kept
  std::string dir;              // "" = <run.out_dir>/<run.name>/checkpoints
  // A checkpoint that cannot be written: "warn" logs one line and trains on (the run's end
  // line and summary.json count the checkpoints asked for and written); "stop" ends the run
  // with an error at the first one (docs/checkpoints.md "When a checkpoint cannot be written").
  std::string on_failure = "warn";

  template <class V>
  void fields(V& v) {
    using namespace atl::fields;
    v.field("every", every, at_least(0));
    v.field("keep", keep, at_least(1));
    v.field("dir", dir);
    v.field("on_failure", on_failure, one_of({"warn", "stop"}));
  }
};

struct Config {
  std::string source;           // file the config was read from ("" when built in code)
  RunConfig run;
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  IslandsConfig islands;
  algorithms::AlgorithmOptions algorithm;  // algorithms/options.h: name + that algorithm's options
  std::vector<CompressionStage> compression;  // empty = raw fp32 on the wire
  TransportConfig transport;
  ComputeConfig compute;
  NetworkConfig network;
  HostsConfig hosts;
  SlurmConfig slurm;
  DipacoConfig dipaco;
  CheckpointConfig checkpoint;
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
//   with "--set section.key=value:" instead of FILE:LINE. "section={key: value, ...}" replaces
//   the whole section: the keys it leaves out are back at their defaults, whatever the file
//   set (e.g. algorithm={name: ddp} on a DiLoCo config).
// - Cross-key rule checked after all overrides: model.dim % model.heads == 0.
// - The `algorithm:` keys besides `name` are the chosen algorithm's own options struct
//   (algorithms/options.h), applied once the name is final, whatever the order they were set
//   in; a key of another algorithm is refused:
//   "FILE:LINE: key 'algorithm.topk': is not a key of algorithm 'diloco' (its keys: ...)".
// - algorithm.name and model.name are not checked here: their registries own the names.
// Pure function; safe to call from several threads.
Config parse_config(const std::string& yaml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides = {});

// Which keys of the `algorithm:` section to_yaml writes: kUsed, those of the chosen algorithm's
// options struct, so that the text reads back under the strict key check; kAll, every key any
// algorithm has (one it lacks at the default of the first algorithm that has it), for
// identities that must not change with that choice (core::config_hash).
enum class YamlKeys { kUsed, kAll };

// Fully resolved config as YAML (every field, defaults included; doubles in the shortest
// form that reads back exactly; strings double-quoted). parse_config(to_yaml(c)) gives back c
// (except `source` and `origins`), and to_yaml of that is byte-identical.
std::string to_yaml(const Config& config, YamlKeys which = YamlKeys::kUsed);

// A resolved config's text (to_yaml's layout: sections of "  key: value" lines, the
// compression list as "  - {...}" items) as "section.key" -> value, quotes removed; list
// items are joined with ", " under their section ("compression"). Reads the text only, so a
// config.yaml written by another version of atoll, with other keys, still reads.
std::map<std::string, std::string> flatten_yaml(const std::string& yaml_text);

// Where `key` ("section.key", "islands.events", "compression") was set: "FILE:LINE" or
// "--set key=value"; the config's source name when the text left it at its default.
std::string origin(const Config& config, const std::string& key);

// The one-line user error about `key`, for checks made after parsing: throws atl::UserError
// "ORIGIN: key 'KEY': PROBLEM", ORIGIN as origin() gives it for `origin_key` ("" = `key`;
// e.g. "islands.events" for key "islands.events[2]").
[[noreturn]] void fail_key(const Config& config, const std::string& key, const std::string& problem,
                           const std::string& origin_key = "");

// Checks what depends on the machine rather than the text, after parse_config:
// - data.kind text|tokens|idx needs data.path; idx also needs data.labels_path, and
//   data.val_labels_path when data.val_path is set;
// - every non-empty data.path / labels_path / val_path / val_labels_path must be a readable
//   regular file. Relative paths are relative to the current working directory.
// Throws atl::UserError "FILE:LINE: key 'data.path': file 'X' does not exist" (the place
// comes from Config::origins; the config's source name when the key was not set by text).
void check_environment(const Config& config);

}  // namespace atl::config
