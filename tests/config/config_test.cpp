// Tests for src/config: YAML -> Config, overrides, validation messages, to_yaml round trip,
// check_environment. Every test writes real files into its own temporary directory.
#include "src/config/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <type_traits>
#include <variant>

#include "src/base/status.h"
#include "src/config/schema.h"

namespace atl::config {
namespace {

namespace fs = std::filesystem;

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("atoll_config_test_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `text` to dir_/name and returns the path.
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  fs::path dir_;
};

// The UserError message of `fn`, or a test failure when it does not throw one.
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected atl::UserError";
  return "";
}

std::string load_error(const std::string& path, const std::vector<std::string>& overrides = {}) {
  return error_of([&] { load_config(path, overrides); });
}

// Each algorithm's `algorithm:` keys besides name, written out here: the oracle the options
// structs of algorithms/options.h are held to.
const std::vector<const char*> kOuter = {"outer_optimizer", "outer_lr",    "outer_momentum",
                                         "outer_beta1",     "outer_beta2", "outer_eps"};
std::vector<std::string> keys(std::vector<const char*> before, bool outer, std::vector<const char*> after) {
  std::vector<std::string> out(before.begin(), before.end());
  if (outer) out.insert(out.end(), kOuter.begin(), kOuter.end());
  out.insert(out.end(), after.begin(), after.end());
  return out;
}
const std::vector<std::pair<std::string, std::vector<std::string>>> kAlgorithmKeys = {
    {"ddp", {}},
    {"diloco", keys({"inner_steps"}, true, {"weighting", "error_feedback", "overlap"})},
    {"fedavg", keys({}, true, {"client_fraction", "rounds", "local_steps", "local_epochs", "round_timeout_s",
                               "min_clients", "error_feedback"})},
    {"streaming_diloco", keys({"inner_steps"}, true, {"weighting", "error_feedback", "fragments", "fragment_mode",
                                                      "overlap_steps", "mix_alpha"})},
    {"async_local_sgd", keys({"inner_steps"}, true, {"error_feedback", "async_update", "buffer_size", "dn_c",
                                                     "dynamic_local_updates", "min_local_steps", "grace_s"})},
    {"demo", {"topk", "chunk", "decay"}},
    {"dipaco", keys({"inner_steps"}, true, {"weighting", "error_feedback"})},
    {"sparseloco", {"inner_steps", "outer_lr", "topk", "chunk", "decay", "aggregation"}},
};

// Every member of an options struct as "key=value" (enums by number): the algorithm's
// options compared without to_yaml.
struct Dump {
  std::vector<std::string> out;
  template <class T>
  void field(const char* key, T& member, const fields::Rule& = {}) {
    std::ostringstream text;
    text.precision(17);
    text << key << "=" << member;
    out.push_back(text.str());
  }
  template <class E>
  void choice(const char* key, E& member, std::initializer_list<fields::Choice<E>>) {
    out.push_back(std::string(key) + "=" + std::to_string(static_cast<int>(member)));
  }
};
std::vector<std::string> dump(algorithms::AlgorithmOptions a) {
  Dump d;
  std::visit([&](auto& p) { p.fields(d); }, a.params);
  d.out.insert(d.out.begin(), a.name + " #" + std::to_string(a.params.index()));
  return d.out;
}

// Sets every key of an options struct to a value unlike its default: numbers from kValues,
// bools flipped, a choice to another of its names.
struct SetAll {
  const std::map<std::string, double> values = {
      {"inner_steps", 500},  {"outer_lr", 1e-3},     {"outer_momentum", 0.0},  {"outer_beta1", 0.5},
      {"outer_beta2", 0.75}, {"outer_eps", 2.5},     {"client_fraction", 1.0}, {"rounds", 7},
      {"local_steps", 3},    {"local_epochs", 2},    {"round_timeout_s", 2.5}, {"min_clients", 3},
      {"fragments", 5},      {"overlap_steps", 4},   {"mix_alpha", 0.25},      {"buffer_size", 6},
      {"dn_c", 0.125},       {"min_local_steps", 9}, {"grace_s", 0.5},         {"topk", 11},
      {"chunk", 17},         {"decay", 0.5}};
  template <class T>
  void field(const char* key, T& member, const fields::Rule& = {}) {
    if constexpr (std::is_same_v<T, bool>) member = !member;
    else member = static_cast<T>(values.at(key));
  }
  template <class E>
  void choice(const char*, E& member, std::initializer_list<fields::Choice<E>> names) {
    for (const auto& n : names)
      if (n.value != member) {
        member = n.value;
        return;
      }
  }
};

// Every field, compared one by one (not via to_yaml, which is what is under test).
void expect_same(const Config& a, const Config& b) {
  EXPECT_EQ(a.run.name, b.run.name);
  EXPECT_EQ(a.run.seed, b.run.seed);
  EXPECT_EQ(a.run.out_dir, b.run.out_dir);
  EXPECT_EQ(a.run.threads, b.run.threads);
  EXPECT_EQ(a.run.device, b.run.device);
  EXPECT_EQ(a.run.resume, b.run.resume);
  EXPECT_EQ(a.model.name, b.model.name);
  EXPECT_EQ(a.model.layers, b.model.layers);
  EXPECT_EQ(a.model.heads, b.model.heads);
  EXPECT_EQ(a.model.dim, b.model.dim);
  EXPECT_EQ(a.model.seq_len, b.model.seq_len);
  EXPECT_EQ(a.model.vocab, b.model.vocab);
  EXPECT_EQ(a.model.dropout, b.model.dropout);
  EXPECT_EQ(a.model.tie_embeddings, b.model.tie_embeddings);
  EXPECT_EQ(a.model.hidden, b.model.hidden);
  EXPECT_EQ(a.model.classes, b.model.classes);
  EXPECT_EQ(a.model.input_dim, b.model.input_dim);
  EXPECT_EQ(a.data.kind, b.data.kind);
  EXPECT_EQ(a.data.path, b.data.path);
  EXPECT_EQ(a.data.labels_path, b.data.labels_path);
  EXPECT_EQ(a.data.val_path, b.data.val_path);
  EXPECT_EQ(a.data.val_labels_path, b.data.val_labels_path);
  EXPECT_EQ(a.data.val_fraction, b.data.val_fraction);
  EXPECT_EQ(a.data.partition, b.data.partition);
  EXPECT_EQ(a.data.dirichlet_alpha, b.data.dirichlet_alpha);
  EXPECT_EQ(a.data.shards_per_island, b.data.shards_per_island);
  EXPECT_EQ(a.data.synthetic_examples, b.data.synthetic_examples);
  EXPECT_EQ(a.data.synthetic_dim, b.data.synthetic_dim);
  EXPECT_EQ(a.data.synthetic_classes, b.data.synthetic_classes);
  EXPECT_EQ(a.train.optimizer, b.train.optimizer);
  EXPECT_EQ(a.train.lr, b.train.lr);
  EXPECT_EQ(a.train.min_lr_ratio, b.train.min_lr_ratio);
  EXPECT_EQ(a.train.schedule, b.train.schedule);
  EXPECT_EQ(a.train.warmup_steps, b.train.warmup_steps);
  EXPECT_EQ(a.train.beta1, b.train.beta1);
  EXPECT_EQ(a.train.beta2, b.train.beta2);
  EXPECT_EQ(a.train.eps, b.train.eps);
  EXPECT_EQ(a.train.weight_decay, b.train.weight_decay);
  EXPECT_EQ(a.train.momentum, b.train.momentum);
  EXPECT_EQ(a.train.grad_clip, b.train.grad_clip);
  EXPECT_EQ(a.train.batch_size, b.train.batch_size);
  EXPECT_EQ(a.train.grad_accum, b.train.grad_accum);
  EXPECT_EQ(a.train.steps, b.train.steps);
  EXPECT_EQ(a.train.eval_every, b.train.eval_every);
  EXPECT_EQ(a.train.eval_batches, b.train.eval_batches);
  EXPECT_EQ(a.train.log_every, b.train.log_every);
  EXPECT_EQ(a.islands.count, b.islands.count);
  EXPECT_EQ(a.islands.ranks, b.islands.ranks);
  EXPECT_EQ(dump(a.algorithm), dump(b.algorithm));
}

TEST_F(ConfigTest, EmptyFileGivesDefaults) {
  const Config c = load_config(write("empty.yaml", ""));
  expect_same(c, Config{});
  EXPECT_EQ(c.source, (dir_ / "empty.yaml").string());
  EXPECT_TRUE(c.origins.empty());
  EXPECT_EQ(c.train.steps, 1000);
  EXPECT_EQ(c.model.hidden, (std::vector<int>{200, 200}));
}

TEST_F(ConfigTest, CommentsAndEmptySectionsKeepDefaults) {
  const Config c = load_config(write("c.yaml", "# nothing yet\nrun:\nmodel: {}\ntrain:\n"));
  expect_same(c, Config{});
}

TEST_F(ConfigTest, ReadsValuesAndRemembersLines) {
  const Config c = load_config(write("c.yaml",
                                     "run:\n"
                                     "  seed: 18446744073709551615\n"
                                     "  resume: yes\n"
                                     "model:\n"
                                     "  name: mlp\n"
                                     "  hidden: [64, 32]\n"
                                     "  dropout: 0.25\n"
                                     "train:\n"
                                     "  lr: 3e-4\n"
                                     "  steps: 010\n"
                                     "algorithm:\n"
                                     "  name: fedavg\n"));
  EXPECT_EQ(c.run.seed, std::numeric_limits<uint64_t>::max());
  EXPECT_TRUE(c.run.resume);
  EXPECT_EQ(c.model.name, "mlp");
  EXPECT_EQ(c.model.hidden, (std::vector<int>{64, 32}));
  EXPECT_EQ(c.model.dropout, 0.25);
  EXPECT_EQ(c.train.lr, 3e-4);
  EXPECT_EQ(c.train.steps, 10);  // decimal, not octal
  EXPECT_EQ(c.algorithm.name, "fedavg");
  EXPECT_EQ(c.train.batch_size, TrainConfig{}.batch_size);  // untouched
  EXPECT_EQ(c.origins.at("train.lr"), c.source + ":9");
  EXPECT_EQ(c.origins.count("train.batch_size"), 0u);
}

TEST_F(ConfigTest, RoundTripOfEveryField) {
  Config c;
  c.run = {"weird: \"name\" #1\n\ttab", 18446744073709551615ull, "", 3, "cuda:1", true};
  c.model.name = "123";
  c.model.layers = 7;
  c.model.heads = 3;
  c.model.dim = 96;
  c.model.seq_len = 33;
  c.model.vocab = 50257;
  c.model.dropout = 0.1 + 0.2;  // 0.30000000000000004
  c.model.tie_embeddings = false;
  c.model.hidden = {};
  c.model.classes = 10;
  c.model.input_dim = 784;
  c.data = {"idx", "a b/c.idx", "true", "null", "~", 1.0 / 3.0, "shards", 1e-300, 5, 9, 2, 3};
  c.train.optimizer = "sgd";
  c.train.lr = 3e-4;
  c.train.min_lr_ratio = 1.0;
  c.train.schedule = "constant";
  c.train.warmup_steps = 0;
  c.train.beta1 = 0.0;
  c.train.beta2 = std::nextafter(1.0, 0.0);
  c.train.eps = 5e-324;  // smallest subnormal
  c.train.weight_decay = 123456789.125;
  c.train.momentum = 0.9;
  c.train.grad_clip = 0.0;
  c.train.batch_size = 1;
  c.train.grad_accum = 8;
  c.train.steps = 9000000000;  // past 32 bits
  c.train.eval_every = 0;
  c.train.eval_batches = 0;
  c.train.log_every = 1;
  c.islands.count = 100;
  c.islands.ranks.values.assign(100, 1);  // one per island (batch_size is 1 here)
  // The resolved text holds the `algorithm:` keys of the chosen algorithm only, so every
  // algorithm is round-tripped, each key of its options set unlike its default; the
  // every-key text (what core::config_hash hashes) holds each of its keys as set and every
  // other algorithm's key at that key's default (the oracle: the every-key text of a default
  // config).
  const auto defaults = flatten_yaml(to_yaml(Config{}, YamlKeys::kAll));
  for (const auto& [name, expected_keys] : kAlgorithmKeys) {
    c.algorithm.choose(name);
    const std::vector<std::string> before = dump(c.algorithm);
    SetAll set_all;
    std::visit([&](auto& p) { p.fields(set_all); }, c.algorithm.params);
    const auto all_set = flatten_yaml(to_yaml(c, YamlKeys::kAll));
    const std::string text = to_yaml(c);
    const Config back = parse_config(text, "resolved.yaml");
    EXPECT_EQ(to_yaml(back), text) << name;
    const auto got = flatten_yaml(to_yaml(back, YamlKeys::kAll));
    EXPECT_EQ(got, all_set) << name;
    for (const auto& field : schema::find_section("algorithm")->fields) {
      const std::string key = "algorithm." + field.name;
      const bool own = std::find(expected_keys.begin(), expected_keys.end(), field.name) != expected_keys.end();
      if (field.name == "name") EXPECT_EQ(got.at(key), name);
      else if (own) EXPECT_NE(got.at(key), defaults.at(key)) << name << " " << key;
      else EXPECT_EQ(got.at(key), defaults.at(key)) << name << " " << key;
    }
    const std::vector<std::string> after = dump(back.algorithm);
    EXPECT_EQ(after, dump(c.algorithm)) << name;
    for (size_t i = 1; i < after.size(); ++i) EXPECT_NE(after[i], before[i]) << name;  // every key was set
    expect_same(back, c);
    // Also through a real file, as the run directory stores it.
    EXPECT_EQ(to_yaml(load_config(write("resolved.yaml", text))), text) << name;
  }
}

TEST_F(ConfigTest, ToYamlWritesEveryKey) {
  const std::string text = to_yaml(Config{}, YamlKeys::kAll);
  for (const auto& section : schema::sections()) {
    EXPECT_NE(text.find(section.name + ":"), std::string::npos) << section.name;
    for (const auto& field : section.fields)
      EXPECT_NE(text.find(" " + field.name + ": "), std::string::npos) << field.name;
  }
  EXPECT_NE(text.find("lr: 0.001\n"), std::string::npos) << text;
  EXPECT_NE(text.find("hidden: [200, 200]"), std::string::npos) << text;
}

// The resolved config writes every key of every section but `algorithm:`, where it writes the
// keys of the chosen algorithm: each section's keys outside `algorithm:` as ToYamlWritesEveryKey,
// and under it exactly name plus kAlgorithmKeys' row, in that order.
TEST_F(ConfigTest, ToYamlWritesTheChosenAlgorithmsKeys) {
  for (const auto& [name, row_keys] : kAlgorithmKeys) {
    Config c;
    c.algorithm.choose(name);
    std::vector<std::string> written;
    for (const auto& [key, value] : flatten_yaml(to_yaml(c)))
      if (key.rfind("algorithm.", 0) == 0) written.push_back(key.substr(10));
    std::vector<std::string> expected = {"name"};
    expected.insert(expected.end(), row_keys.begin(), row_keys.end());
    std::sort(written.begin(), written.end());
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(written, expected) << name;
    // In its options' order, as the docs list them.
    std::vector<std::string> in_order;
    std::istringstream text(to_yaml(c));
    std::string line;
    bool in_section = false;
    while (std::getline(text, line)) {
      if (!line.empty() && line[0] != ' ') in_section = line == "algorithm:";
      else if (in_section && line.rfind("  name:", 0) != 0) in_order.push_back(line.substr(2, line.find(':') - 2));
    }
    EXPECT_EQ(in_order, row_keys) << name;
    const auto every = flatten_yaml(to_yaml(c, YamlKeys::kAll));
    for (const auto& [key, value] : flatten_yaml(to_yaml(c)))
      if (key.rfind("algorithm.", 0) != 0) {
        EXPECT_EQ(every.count(key), 1u) << key;
      }
  }
}

// A key of the `algorithm:` section that the chosen algorithm does not read is refused with
// its file and line and the keys that algorithm has, from the file and from --set alike; every
// algorithm's own keys are accepted.
TEST_F(ConfigTest, AKeyOfAnotherAlgorithmIsRefused) {
  const std::string path = write("c.yaml", "algorithm:\n  name: diloco\n  topk: 8\n");
  EXPECT_EQ(load_error(path), path + ":3: key 'algorithm.topk': is not a key of algorithm 'diloco' (its keys: "
                                     "name, inner_steps, outer_optimizer, outer_lr, outer_momentum, outer_beta1, "
                                     "outer_beta2, outer_eps, weighting, error_feedback, overlap)");
  const std::string demo = write("d.yaml", "algorithm: {name: demo, outer_lr: 0.7}\n");
  EXPECT_EQ(load_error(demo), demo + ":1: key 'algorithm.outer_lr': is not a key of algorithm 'demo' "
                                     "(its keys: name, topk, chunk, decay)");
  try {
    parse_config("algorithm: {name: diloco}\n", "c.yaml", {"algorithm.name=ddp"});
    const Config ok = parse_config("algorithm: {name: diloco, inner_steps: 5}\n", "c.yaml", {"algorithm.name=diloco"});
    EXPECT_EQ(ok.algorithm.get<algorithms::DilocoOptions>().inner_steps, 5);
    parse_config("algorithm: {name: diloco, inner_steps: 5}\n", "c.yaml", {"algorithm.name=ddp"});
    ADD_FAILURE() << "ddp with inner_steps was accepted";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), "c.yaml:1: key 'algorithm.inner_steps': is not a key of algorithm 'ddp' (its keys: "
                                     "name); to replace the file's algorithm section, --set 'algorithm={name: ddp}'");
  }
  // What that hint says: the section replaced, the file's keys of it back at their defaults.
  const Config ddp = parse_config("algorithm: {name: diloco, inner_steps: 5}\ntrain: {steps: 7}\n", "c.yaml",
                                  {"algorithm={name: ddp}"});
  EXPECT_EQ(ddp.algorithm.name, "ddp");
  EXPECT_TRUE(std::holds_alternative<algorithms::DdpOptions>(ddp.algorithm.params));
  EXPECT_EQ(ddp.origins.count("algorithm.inner_steps"), 0u);
  const Config again = parse_config("algorithm: {name: diloco, inner_steps: 5, outer_optimizer: adam}\n", "c.yaml",
                                    {"algorithm={name: diloco}"});
  EXPECT_EQ(again.algorithm.get<algorithms::DilocoOptions>().inner_steps, algorithms::DilocoOptions{}.inner_steps);
  EXPECT_EQ(again.algorithm.get<algorithms::DilocoOptions>().outer.kind, algorithms::OuterKind::kNesterov);
  EXPECT_EQ(again.origins.count("algorithm.inner_steps"), 0u);
  EXPECT_EQ(ddp.origins.at("algorithm.name"), "--set algorithm={name: ddp}");
  EXPECT_EQ(ddp.train.steps, 7);  // other sections untouched
  const Config demo_set = parse_config("algorithm: {name: diloco, inner_steps: 5, outer_optimizer: adam}\n", "c.yaml",
                                       {"algorithm={name: demo, topk: 4}"});
  EXPECT_EQ(demo_set.algorithm.get<algorithms::DemoOptions>().topk, 4);
  EXPECT_EQ(demo_set.origins.count("algorithm.outer_optimizer"), 0u);
  for (const char* bad : {"algorithm=[1, 2]", "algorithm={name: demo, tpok: 4}", "algorithm={name: demo, outer_lr: 1}"}) {
    try {
      parse_config("", "c.yaml", {bad});
      ADD_FAILURE() << bad << " was accepted";
    } catch (const UserError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(std::string("--set ") + bad + ": key 'algorithm", 0), 0u) << e.what();
    }
  }
  try {
    parse_config("algorithm: {name: demo}\n", "c.yaml", {"algorithm.inner_steps=5"});
    ADD_FAILURE() << "demo with --set inner_steps was accepted";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--set algorithm.inner_steps=5: key 'algorithm.inner_steps': is not a key", 0), 0u)
        << e.what();
  }
  // Every key of each row is accepted for its algorithm (a value of the key's own default).
  const auto defaults = flatten_yaml(to_yaml(Config{}, YamlKeys::kAll));
  for (const auto& [name, row_keys] : kAlgorithmKeys) {
    std::string yaml = "algorithm:\n  name: " + name + "\n";
    for (const auto& k : row_keys) yaml += "  " + k + ": " + defaults.at("algorithm." + k) + "\n";
    EXPECT_NO_THROW(parse_config(yaml, "c.yaml")) << yaml;
  }
}

// islands.ranks: one number for every island, or one per island; written back as it was given.
TEST_F(ConfigTest, RanksAreOneNumberOrOnePerIsland) {
  const Config one = parse_config("train: {batch_size: 8}\nislands: {count: 3, ranks: 4}\n", "c.yaml");
  EXPECT_EQ(one.islands.ranks.values, std::vector<int>{4});
  EXPECT_EQ(one.islands.ranks.of(2), 4);
  EXPECT_NE(to_yaml(one).find("ranks: 4\n"), std::string::npos) << to_yaml(one);
  const Config each = parse_config("train: {batch_size: 8}\nislands: {count: 3, ranks: [1, 2, 8]}\n", "c.yaml");
  EXPECT_EQ(each.islands.ranks.of(0), 1);
  EXPECT_EQ(each.islands.ranks.of(2), 8);
  EXPECT_EQ(each.islands.ranks.max(), 8);
  EXPECT_EQ(to_yaml(parse_config(to_yaml(each), "back.yaml")), to_yaml(each));
  EXPECT_EQ(Config{}.islands.ranks.of(7), 1);
  auto error = [](const std::string& yaml) { return error_of([&] { parse_config(yaml, "c.yaml"); }); };
  EXPECT_EQ(error("islands: {ranks: []}\n"),
            "c.yaml:1: key 'islands.ranks': expected an integer or a list of them, got []");
  EXPECT_EQ(error("islands: {ranks: [2, x]}\n"), "c.yaml:1: key 'islands.ranks': ranks[1]: expected an integer, got 'x'");
  EXPECT_EQ(error("islands: {ranks: 1.5}\n"), "c.yaml:1: key 'islands.ranks': expected an integer, got '1.5'");
}

TEST_F(ConfigTest, MisspeltKeySuggestsClosest) {
  const std::string path =
      write("typo.yaml", "algorithm:\n  name: diloco\n  inner_step: 10\n");
  EXPECT_EQ(load_error(path), path + ":3: key 'algorithm.inner_step': unknown key "
                                     "(did you mean 'algorithm.inner_steps'?)");
}

TEST_F(ConfigTest, MisspeltSectionSuggestsClosest) {
  const std::string path = write("typo.yaml", "run:\n  seed: 1\nmodle:\n  dim: 64\n");
  EXPECT_EQ(load_error(path), path + ":3: key 'modle': unknown section (did you mean 'model'?)");
}

TEST_F(ConfigTest, KeyInWrongSectionSuggestsTheRightOne) {
  const std::string path = write("c.yaml", "model:\n  lr: 0.1\n");
  EXPECT_EQ(load_error(path), path + ":2: key 'model.lr': unknown key (did you mean 'train.lr'?)");
}

TEST_F(ConfigTest, UnknownKeyFarFromAllHasNoSuggestion) {
  const std::string msg = load_error(write("c.yaml", "train:\n  completely_unrelated: 1\n"));
  EXPECT_NE(msg.find(":2: key 'train.completely_unrelated': unknown key"), std::string::npos);
  EXPECT_EQ(msg.find("did you mean"), std::string::npos) << msg;
}

TEST_F(ConfigTest, DuplicateKeyIsAnError) {
  const std::string path = write("c.yaml", "train:\n  lr: 0.1\n  lr: 0.2\n");
  EXPECT_EQ(load_error(path), path + ":3: key 'train.lr': duplicate key (first at " + path + ":2)");
}

TEST_F(ConfigTest, WrongTypesAreErrors) {
  struct Case {
    std::string yaml, expected;
  };
  const std::vector<Case> cases = {
      {"model:\n  layers: four\n", ":2: key 'model.layers': expected an integer, got 'four'"},
      {"model:\n  layers: 1.5\n", ":2: key 'model.layers': expected an integer, got '1.5'"},
      {"model:\n  layers: \"4\"\n", "key 'model.layers': expected an integer, got the quoted"},
      {"model:\n  layers: 3000000000\n", "does not fit in a 32-bit integer"},
      {"train:\n  lr: [1]\n", ":2: key 'train.lr': expected a number, got a list"},
      {"train:\n  lr: fast\n", "key 'train.lr': expected a number, got 'fast'"},
      {"train:\n  lr: .nan\n", "key 'train.lr': expected a number"},
      {"train:\n  lr: inf\n", "key 'train.lr': must be a finite number"},
      {"run:\n  resume: maybe\n", "key 'run.resume': expected true or false, got 'maybe'"},
      {"run:\n  seed: -1\n", "key 'run.seed': expected a non-negative integer, got '-1'"},
      {"run:\n  name: {a: 1}\n", "key 'run.name': expected a string, got a mapping"},
      {"model:\n  hidden: 64\n", "key 'model.hidden': expected a list of integers, got '64'"},
      {"model:\n  hidden: [64, x]\n", "key 'model.hidden': hidden[1]: expected an integer"},
      {"train: 5\n", ":1: key 'train': expected a mapping of keys, got '5'"},
      {"- run\n", ":1: expected a mapping of sections"},
  };
  for (const auto& c : cases) {
    const std::string msg = load_error(write("c.yaml", c.yaml));
    EXPECT_NE(msg.find(c.expected), std::string::npos) << c.yaml << " -> " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  }
}

TEST_F(ConfigTest, YesIsABool) {
  EXPECT_FALSE(load_config(write("c.yaml", "model:\n  tie_embeddings: no\n")).model.tie_embeddings);
  EXPECT_TRUE(load_config(write("c.yaml", "run:\n  resume: On\n")).run.resume);
}

TEST_F(ConfigTest, NegativeStepsSaysMustBeAtLeastOne) {
  const std::string path = write("c.yaml", "train:\n  lr: 0.1\n  steps: -5\n");
  EXPECT_EQ(load_error(path), path + ":3: key 'train.steps': must be >= 1 (got -5)");
}

TEST_F(ConfigTest, RangesAreChecked) {
  struct Case {
    std::string yaml, expected;
  };
  const std::vector<Case> cases = {
      {"run:\n  threads: -1\n", "key 'run.threads': must be >= 0 (got -1)"},
      {"model:\n  dropout: 1\n", "key 'model.dropout': must be in [0, 1) (got 1)"},
      {"model:\n  hidden: [64, 0]\n", "key 'model.hidden': hidden[1]: must be >= 1 (got 0)"},
      {"data:\n  val_fraction: 0\n", "key 'data.val_fraction': must be in (0, 1) (got 0)"},
      {"data:\n  dirichlet_alpha: 0.0\n", "key 'data.dirichlet_alpha': must be > 0"},
      {"data:\n  synthetic_classes: 1\n", "key 'data.synthetic_classes': must be >= 2 (got 1)"},
      {"train:\n  lr: 0\n", "key 'train.lr': must be > 0 (got 0)"},
      {"train:\n  min_lr_ratio: 1.5\n", "key 'train.min_lr_ratio': must be in [0, 1] (got 1.5)"},
      {"train:\n  beta2: -0.1\n", "key 'train.beta2': must be in [0, 1) (got -0.1)"},
      {"train:\n  log_every: 0\n", "key 'train.log_every': must be >= 1 (got 0)"},
      {"islands:\n  count: 0\n", "key 'islands.count': must be >= 1 (got 0)"},
      {"algorithm:\n  client_fraction: 0\n", "key 'algorithm.client_fraction': must be in (0, 1]"},
      {"algorithm:\n  outer_momentum: 1\n", "key 'algorithm.outer_momentum': must be in [0, 1)"},
      {"algorithm:\n  local_epochs: 0\n", "key 'algorithm.local_epochs': must be >= 1 (got 0)"},
  };
  for (const auto& c : cases) {
    const std::string msg = load_error(write("c.yaml", c.yaml));
    EXPECT_NE(msg.find(":2: " + c.expected), std::string::npos) << c.yaml << " -> " << msg;
  }
  // The closed ends are allowed.
  const Config ok = load_config(write(
      "ok.yaml", "algorithm:\n  name: fedavg\n  client_fraction: 1\ntrain:\n  min_lr_ratio: 0\n  beta1: 0\n"));
  EXPECT_EQ(ok.algorithm.get<algorithms::FedAvgOptions>().client_fraction, 1.0);
  EXPECT_EQ(ok.train.min_lr_ratio, 0.0);
}

// The algorithm section is the chosen algorithm's options struct (algorithms/options.h): the YAML names of its
// enum options reach the algorithms' own enums (no copy in between), are written back by
// name, and a name that is not one of them is refused with the valid ones.
TEST_F(ConfigTest, AlgorithmOptionsAreReadIntoTheAlgorithmsStruct) {
  const Config c = load_config(write("c.yaml",
                                     "algorithm:\n  outer_optimizer: adam\n  weighting: shard_size\n"
                                     "  overlap: eager\n"));
  const Config streaming = load_config(write("s.yaml", "algorithm:\n  name: streaming_diloco\n  fragment_mode: sequential\n"));
  const Config async = load_config(write("a.yaml", "algorithm:\n  name: async_local_sgd\n  async_update: naive\n"));
  EXPECT_EQ(c.algorithm.get<algorithms::DilocoOptions>().outer.kind, algorithms::OuterKind::kAdam);
  EXPECT_TRUE(c.algorithm.get<algorithms::DilocoOptions>().weight_by_shard);
  EXPECT_EQ(c.algorithm.get<algorithms::DilocoOptions>().overlap, algorithms::Overlap::kEager);
  EXPECT_EQ(streaming.algorithm.get<algorithms::StreamingDilocoOptions>().fragment_mode,
            algorithms::FragmentMode::kSequential);
  EXPECT_EQ(async.algorithm.get<algorithms::AsyncLocalSgdOptions>().async_update, algorithms::AsyncUpdate::kNaive);
  const std::string text = to_yaml(c) + to_yaml(streaming) + to_yaml(async);
  for (const char* line : {"outer_optimizer: \"adam\"", "weighting: \"shard_size\"", "overlap: \"eager\"",
                           "fragment_mode: \"sequential\"", "async_update: \"naive\""})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  const Config defaults = parse_config("", "empty.yaml");
  EXPECT_EQ(defaults.algorithm.get<algorithms::DilocoOptions>().outer.kind, algorithms::OuterKind::kNesterov);
  EXPECT_EQ(parse_config("algorithm: {name: fedavg}\n", "f.yaml").algorithm.get<algorithms::FedAvgOptions>().rounds,
            0);  // derived from train.steps when the run is built
  const std::string path = write("c.yaml", "algorithm:\n  overlap: eagre\n");
  EXPECT_EQ(load_error(path), path + ":2: key 'algorithm.overlap': 'eagre' is not one of: none, delayed, eager "
                                     "(did you mean 'eager'?)");
}

TEST_F(ConfigTest, DimMustBeDivisibleByHeads) {
  const std::string path = write("c.yaml", "model:\n  dim: 100\n  heads: 3\n");
  EXPECT_EQ(load_error(path),
            path + ":3: key 'model.heads': model.dim (100) must be divisible by model.heads (3)");
  // An override can fix it.
  EXPECT_EQ(load_config(path, {"model.heads=4"}).model.heads, 4);
}

TEST_F(ConfigTest, EnumErrorListsValidValues) {
  const std::string path = write("c.yaml", "train:\n  optimizer: adam\n");
  EXPECT_EQ(load_error(path), path + ":2: key 'train.optimizer': 'adam' is not one of: adamw, sgd "
                                     "(did you mean 'adamw'?)");
  const std::string msg = load_error(write("d.yaml", "data:\n  partition: random\n"));
  EXPECT_NE(msg.find("iid, contiguous, dirichlet, shards"), std::string::npos) << msg;
  // The algorithm name belongs to the algorithm registry, not to the parser.
  EXPECT_EQ(load_config(write("e.yaml", "algorithm:\n  name: mine\n")).algorithm.name, "mine");
}

TEST_F(ConfigTest, OverridesApplyAfterTheFileInOrder) {
  const std::string path = write("c.yaml", "train:\n  lr: 0.1\n  steps: 20\n");
  const Config c = load_config(path, {"train.lr=3e-4", "model.hidden=[64, 64]", "train.lr=5e-4",
                                      "run.name=", "run.resume=true", "data.kind=synthetic"});
  EXPECT_EQ(c.train.lr, 5e-4);
  EXPECT_EQ(c.train.steps, 20);  // from the file
  EXPECT_EQ(c.model.hidden, (std::vector<int>{64, 64}));
  EXPECT_EQ(c.run.name, "");
  EXPECT_TRUE(c.run.resume);
  EXPECT_EQ(c.data.kind, "synthetic");
  EXPECT_EQ(c.origins.at("train.lr"), "--set train.lr=5e-4");
  EXPECT_EQ(c.origins.at("train.steps"), path + ":3");
}

TEST_F(ConfigTest, OverrideTypeAndRangeErrorsNameTheOverride) {
  const std::string path = write("c.yaml", "");
  EXPECT_EQ(load_error(path, {"train.steps=abc"}),
            "--set train.steps=abc: key 'train.steps': expected an integer, got 'abc'");
  EXPECT_EQ(load_error(path, {"train.steps=-3"}),
            "--set train.steps=-3: key 'train.steps': must be >= 1 (got -3)");
  EXPECT_EQ(load_error(path, {"train.optimizer=lion"}),
            "--set train.optimizer=lion: key 'train.optimizer': 'lion' is not one of: adamw, sgd");
  EXPECT_EQ(load_error(path, {"model.heads=3"}),
            "--set model.heads=3: key 'model.heads': model.dim (128) must be divisible by "
            "model.heads (3)");
  const std::string syntax = load_error(path, {"model.hidden=[1, 2"});
  EXPECT_EQ(syntax.rfind("--set model.hidden=[1, 2: key 'model.hidden': YAML syntax error", 0),
            0u) << syntax;
}

TEST_F(ConfigTest, OverrideUnknownKeySuggestsClosest) {
  const std::string path = write("c.yaml", "");
  EXPECT_EQ(load_error(path, {"train.setps=5"}),
            "--set train.setps=5: key 'train.setps': unknown key (did you mean 'train.steps'?)");
  EXPECT_EQ(load_error(path, {"trian.steps=5"}),
            "--set trian.steps=5: key 'trian.steps': unknown section 'trian' "
            "(did you mean 'train.steps'?)");
  EXPECT_EQ(load_error(path, {"steps=5"}),
            "--set steps=5: key 'steps': expected section.key (did you mean 'train.steps'?)");
}

TEST_F(ConfigTest, MalformedOverrideIsAnError) {
  const std::string msg = load_error(write("c.yaml", ""), {"train.steps"});
  EXPECT_EQ(msg, "--set train.steps: expected section.key=value, e.g. train.lr=3e-4");
}

TEST_F(ConfigTest, YamlSyntaxErrorHasFileAndLine) {
  const std::string path = write("bad.yaml", "model:\n  hidden: [1, 2\ntrain:\n  lr: 1\n");
  const std::string msg = load_error(path);
  EXPECT_EQ(msg.rfind(path + ":", 0), 0u) << msg;
  EXPECT_NE(msg.find(": YAML syntax error: "), std::string::npos) << msg;
  const std::string indent = load_error(write("indent.yaml", "train:\n  lr: 1\n    steps: 2\n"));
  EXPECT_EQ(indent.rfind((dir_ / "indent.yaml").string() + ":3: YAML syntax error:", 0), 0u)
      << indent;
}

TEST_F(ConfigTest, MoreThanOneDocumentIsAnError) {
  const std::string msg = load_error(write("c.yaml", "train:\n  lr: 1\n---\ntrain:\n  lr: 2\n"));
  EXPECT_NE(msg.find("expected one YAML document, found 2"), std::string::npos) << msg;
}

TEST_F(ConfigTest, MissingFile) {
  const std::string path = (dir_ / "nope.yaml").string();
  EXPECT_EQ(load_error(path), "cannot read config file '" + path + "': No such file or directory");
}

TEST_F(ConfigTest, CheckEnvironmentFindsMissingDataFile) {
  const std::string missing = (dir_ / "missing.txt").string();
  const std::string path =
      write("c.yaml", "run:\n  seed: 1\ndata:\n  kind: text\n  path: " + missing + "\n");
  const Config c = load_config(path);
  EXPECT_EQ(error_of([&] { check_environment(c); }),
            path + ":5: key 'data.path': file '" + missing + "' does not exist");

  // Once the file exists the same config passes.
  write("missing.txt", "hello");
  EXPECT_NO_THROW(check_environment(c));

  // A path set by --set is reported against the --set.
  const std::string gone = (dir_ / "gone.bin").string();
  const Config o = load_config(path, {"data.val_path=" + gone});
  EXPECT_EQ(error_of([&] { check_environment(o); }),
            "--set data.val_path=" + gone + ": key 'data.val_path': file '" + gone +
                "' does not exist");

  // A directory is not a data file.
  const Config d = load_config(path, {"data.path=" + dir_.string()});
  EXPECT_NE(error_of([&] { check_environment(d); }).find("is a directory"), std::string::npos);
}

TEST_F(ConfigTest, CheckEnvironmentNeedsAPathForFileKinds) {
  const std::string path = write("c.yaml", "data:\n  kind: tokens\n");
  const Config c = load_config(path);
  const std::string msg = error_of([&] { check_environment(c); });
  EXPECT_EQ(msg.rfind(path + ":2: key 'data.path': ", 0), 0u) << msg;
  // The default kind (text) needs one too; synthetic data needs none.
  EXPECT_NE(error_of([] { check_environment(Config{}); }).find("key 'data.path'"),
            std::string::npos);
  EXPECT_NO_THROW(check_environment(load_config(path, {"data.kind=synthetic"})));
  // idx needs its labels file.
  const std::string images = write("images.idx", "x");
  const Config idx = load_config(path, {"data.kind=idx", "data.path=" + images});
  EXPECT_NE(error_of([&] { check_environment(idx); }).find("key 'data.labels_path'"),
            std::string::npos);
}

TEST(ConfigSchemaTest, ClosestUsesEditDistanceWithALimit) {
  const std::vector<std::string> names = {"inner_steps", "outer_lr", "outer_momentum"};
  EXPECT_EQ(schema::closest("inner_step", names), "inner_steps");
  EXPECT_EQ(schema::closest("outre_lr", names), "outer_lr");  // a swap is one edit
  EXPECT_EQ(schema::closest("banana", names), std::nullopt);
}

TEST(ConfigSchemaTest, ScalarsAreStrict) {
  EXPECT_EQ(schema::parse_int("+12"), 12);
  EXPECT_EQ(schema::parse_int("010"), 10);
  EXPECT_EQ(schema::parse_int("1e3"), std::nullopt);
  EXPECT_EQ(schema::parse_int("0x10"), std::nullopt);
  EXPECT_EQ(schema::parse_int("99999999999999999999"), std::nullopt);
  EXPECT_EQ(schema::parse_uint("-0"), std::nullopt);
  EXPECT_EQ(schema::parse_double("1e-3"), 1e-3);
  EXPECT_EQ(schema::parse_double("1.5x"), std::nullopt);
  EXPECT_EQ(schema::format_double(1e-3), "0.001");
  EXPECT_EQ(schema::format_double(2.0), "2.0");
  const double third = 1.0 / 3.0;
  EXPECT_EQ(schema::parse_double(schema::format_double(third)), third);
}

}  // namespace
}  // namespace atl::config
