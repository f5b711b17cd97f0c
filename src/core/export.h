// `atoll export RUN_DIR`: a run's global model as a file PyTorch loads with torch.load
// (docs/checkpoints.md "Export"): a dict from the model's parameter names
// ("blocks.0.attn.qkv.weight") to float32 tensors of their shapes, written by libtorch's own
// pickler (torch::pickle_save, the format torch.save writes).
#pragma once

#include <cstdint>
#include <string>

namespace atl::core {

struct ExportOptions {
  std::string run_dir;     // runs/<name>: its config.yaml says which model
  std::string format = "pt";
  // The parameters: this checkpoint file's global model; "" = the run's final_params.bin,
  // or, when the run has none (it did not finish), its newest usable checkpoint.
  std::string checkpoint;
  std::string out;         // "" = <run_dir>/final_params.pt (a checkpoint: step-S.pt; a
                           // path: final_params.path<P>.pt)
  int path = -1;           // path P's final_params.path<P>.bin (not with checkpoint)
};

struct ExportResult {
  std::string out;         // the file written
  std::string source;      // where the parameters came from
  int64_t tensors = 0;     // entries of the dict
  int64_t params = 0;      // parameters in all
};

// Throws atl::UserError (one line) for a missing or unreadable run directory, parameter
// file or checkpoint, an unknown format, or parameters that do not fit the run's model.
ExportResult export_params(const ExportOptions& options);

}  // namespace atl::core
