#include "src/core/export.h"

#include <ATen/ATen.h>
#include <torch/serialize.h>

#include <filesystem>

#include "src/base/log.h"
#include "src/base/status.h"
#include "src/checkpoint/checkpoint_dir.h"
#include "src/config/config.h"
#include "src/core/island_parts.h"
#include "src/core/params_file.h"
#include "src/core/run_dir.h"
#include "src/core/sim_checkpoint.h"
#include "src/models/model.h"

namespace fs = std::filesystem;

namespace atl::core {
namespace {

// The global model of checkpoint file `path`, and its step.
at::Tensor checkpoint_global(const std::string& path, int64_t& step) {
  StatusOr<checkpoint::Checkpoint> file = checkpoint::read_checkpoint(path);
  if (!file.is_ok()) throw UserError("export: " + file.status().message());
  StatusOr<SimCheckpoint> c = decode_global(*file, "checkpoint '" + path + "'");
  if (!c.is_ok()) throw UserError("export: " + c.status().message());
  step = c->step;
  return c->global;
}

}  // namespace

ExportResult export_params(const ExportOptions& o) {
  if (o.format != "pt") throw UserError("export: --format '" + o.format + "' is not known (pt)");
  const fs::path run(o.run_dir);
  const fs::path config_file = run / "config.yaml";
  if (!fs::exists(config_file))
    throw UserError("export: '" + o.run_dir + "' is not a run directory (no config.yaml)");
  const config::Config config = config::load_config(config_file.string());

  ExportResult r;
  at::Tensor flat;
  std::string out_name = "final_params.pt";
  int64_t step = -1;
  if (o.path >= 0) {  // one path's final parameters
    if (!o.checkpoint.empty()) throw UserError("export: --path and --checkpoint together are not supported");
    const fs::path file = run / final_params_name(o.path);
    if (!fs::exists(file))
      throw UserError("export: '" + o.run_dir + "' has no " + final_params_name(o.path) +
                      " (a finished run of several paths writes final_params.path<P>.bin for each)");
    r.source = file.string();
    StatusOr<at::Tensor> p = read_params(r.source);
    if (!p.is_ok()) throw UserError("export: " + p.status().to_string());
    flat = *p;
    out_name = "final_params.path" + std::to_string(o.path) + ".pt";
  } else if (!o.checkpoint.empty()) {
    flat = checkpoint_global(o.checkpoint, step);
    r.source = o.checkpoint;
  } else if (fs::exists(run / "final_params.bin")) {
    r.source = (run / "final_params.bin").string();
    StatusOr<at::Tensor> p = read_params(r.source);
    if (!p.is_ok()) throw UserError("export: " + p.status().to_string());
    flat = *p;
  } else {
    const std::string dir =
        config.checkpoint.dir.empty() ? (run / "checkpoints").string() : config.checkpoint.dir;
    StatusOr<checkpoint::Loaded> l = checkpoint::CheckpointDir(dir, 1).load_latest(
        [](const std::string& line) { ATOLL_WARN(line); });
    if (!l.is_ok())
      throw UserError("export: '" + o.run_dir + "' has no final_params.bin (the run did not finish) and no "
                      "usable checkpoint in '" + dir + "'");
    flat = checkpoint_global(l->path, step);
    r.source = l->path;
  }
  if (step >= 0) out_name = "step-" + std::to_string(step) + ".pt";

  // The model's layout names the slices of the flat vector.
  const RunData data = load_run_data(config);
  const auto model = models::make_model(config.model, data.shape, c10::Device(at::kCPU), config.run.seed);
  if (model->numel() != flat.numel())
    throw UserError("export: '" + r.source + "' holds " + std::to_string(flat.numel()) + " parameters but the "
                    "run's model has " + std::to_string(model->numel()));
  flat = flat.to(at::kCPU).to(at::kFloat).contiguous();
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& s : model->layout()) {
    // Each entry its own storage: torch.load gives independent tensors.
    const std::vector<int64_t> shape = s.shape.empty() ? std::vector<int64_t>{s.numel} : s.shape;
    dict.insert(s.name, flat.slice(0, s.offset, s.offset + s.numel).view(shape).clone());
    ++r.tensors;
    r.params += s.numel;
  }
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(dict));
  r.out = o.out.empty() ? (run / out_name).string() : o.out;
  write_file_atomic(r.out, std::string(bytes.begin(), bytes.end()));
  return r;
}

}  // namespace atl::core
