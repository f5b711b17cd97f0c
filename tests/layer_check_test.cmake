# cmake/check_layers.cmake on a small tree with one wrong-layer include per rule (and
# allowed ones): it must fail, name every violation with FILE:LINE, and nothing else.
#
#   cmake -DCHECKER=<cmake/check_layers.cmake> -DWORK=<scratch dir> -P tests/layer_check_test.cmake
cmake_minimum_required(VERSION 3.22)

file(REMOVE_RECURSE "${WORK}")
# Allowed: own layer, lower layers, a neighbour by bare name, system headers.
file(WRITE "${WORK}/src/base/log.h" "#include <string>\n")
file(WRITE "${WORK}/compression/ok.cpp"
     "#include \"compression/frame.h\"\n#include \"src/base/status.h\"\n#include \"neighbour.h\"\n#include <zstd.h>\n")
file(WRITE "${WORK}/transport/ok.cpp"
     "#include \"transport/group.h\"\n#include \"transport/inproc/scheduler.h\"\n#include \"compression/pipeline.h\"\n")
file(WRITE "${WORK}/transport/zmq/ok.cpp" "#include <zmq.hpp>\n#include \"transport/zmq/protocol.h\"\n#include \"transport/ring.h\"\n")
file(WRITE "${WORK}/algorithms/ok.cpp"
     "#include \"algorithms/options.h\"\n#include \"transport/group.h\"\n#include <ATen/ATen.h>\n")
file(WRITE "${WORK}/src/config/ok.cpp"
     "#include \"algorithms/options.h\"\n#include <yaml-cpp/yaml.h>\n#include \"src/dipaco/config.h\"\n")
file(WRITE "${WORK}/src/core/ok.cpp"
     "#include \"transport/inproc/inproc_group.h\"\n#include \"src/models/model.h\"\n#include <torch/torch.h>\n")
file(WRITE "${WORK}/src/run/ok.cpp" "#include \"transport/zmq/coordinator.h\"\n#include \"src/core/json.h\"\n")
file(WRITE "${WORK}/src/dipaco/run/ok.cpp" "#include \"src/core/evaluator.h\"\n#include <ATen/ATen.h>\n")
file(WRITE "${WORK}/src/cli/ok.cpp" "#include \"src/sweep/plan.h\"\n#include \"src/run/processes.h\"\n")
# Violations, one per rule.
file(WRITE "${WORK}/src/base/bad.cpp" "// first line\n#include \"compression/frame.h\"\n")
# Lines with ";", "[", "]" or a backslash (which CMake lists treat specially) before it.
file(WRITE "${WORK}/compression/bad.cpp"
     "#include <vector>\n// x[0, n) and a; b\nint a[3]; \\\n\n#include \"transport/group.h\"\n")
file(WRITE "${WORK}/transport/bad.cpp" "#include \"algorithms/algorithm.h\"\n#include \"src/core/json.h\"\n#include \"transport/zmq/zmq_group.h\"\n#include <zmq.hpp>\n")
file(WRITE "${WORK}/transport/zmq/bad.cpp" "#include <gloo/context.h>\n")
file(WRITE "${WORK}/transport/gloo/bad.cpp" "#include \"transport/zmq/curve.h\"\n")
file(WRITE "${WORK}/transport/relay/bad.cpp" "#include <ATen/ATen.h>\n")
file(WRITE "${WORK}/algorithms/bad.cpp"
     "#include <zmq.hpp>\n#include \"transport/inproc/inproc_group.h\"\n#include \"src/config/config.h\"\n  #  include <yaml-cpp/yaml.h>\n")
file(WRITE "${WORK}/src/config/bad.cpp"
     "#include \"algorithms/algorithm.h\"\n#include <ATen/ATen.h>\n#include \"src/dipaco/paths.h\"\n")
file(WRITE "${WORK}/src/data/bad.cpp" "#include \"src/models/model.h\"\n")
file(WRITE "${WORK}/src/models/bad.cpp" "#include \"src/core/json.h\"\n")
file(WRITE "${WORK}/src/train/bad.cpp" "#include \"src/data/dataset.h\"\n")
file(WRITE "${WORK}/src/dipaco/bad.cpp" "#include <torch/torch.h>\n")
file(WRITE "${WORK}/src/dipaco/run/bad.cpp" "#include \"src/run/processes.h\"\n")
file(WRITE "${WORK}/src/core/bad.cpp" "#include \"transport/zmq/zmq_group.h\"\n#include \"src/run/hosts.h\"\n")
file(WRITE "${WORK}/src/sweep/bad.cpp" "#include \"src/run/processes.h\"\n")
file(WRITE "${WORK}/src/run/bad.cpp" "#include \"src/sweep/plan.h\"\n")
file(WRITE "${WORK}/src/cli/bad.cpp" "#include <yaml-cpp/yaml.h>\n")

execute_process(COMMAND "${CMAKE_COMMAND}" -DROOT=${WORK} -P "${CHECKER}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(out "${out}${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "the checker passed a tree with violations:\n${out}")
endif()
set(expected
  "src/base/bad.cpp:2: includes \"compression/frame.h\": src/base/ may include only"
  "compression/bad.cpp:5: includes \"transport/group.h\": compression/ may include only"
  "transport/bad.cpp:1: includes \"algorithms/algorithm.h\": transport/ may include only"
  "transport/bad.cpp:2: includes \"src/core/json.h\""
  "transport/bad.cpp:3: includes \"transport/zmq/zmq_group.h\""
  "transport/bad.cpp:4: includes <zmq.hpp>"
  "transport/zmq/bad.cpp:1: includes <gloo/context.h>: transport/zmq/ may include only"
  "transport/gloo/bad.cpp:1: includes \"transport/zmq/curve.h\": transport/gloo/ may include only"
  "transport/relay/bad.cpp:1: includes <ATen/ATen.h>: transport/relay/ may include only"
  "algorithms/bad.cpp:1: includes <zmq.hpp>: algorithms/ may include only"
  "algorithms/bad.cpp:2: includes \"transport/inproc/inproc_group.h\""
  "algorithms/bad.cpp:3: includes \"src/config/config.h\""
  "algorithms/bad.cpp:4: includes <yaml-cpp/yaml.h>"
  "src/config/bad.cpp:1: includes \"algorithms/algorithm.h\": src/config/ may include only"
  "src/config/bad.cpp:2: includes <ATen/ATen.h>"
  "src/config/bad.cpp:3: includes \"src/dipaco/paths.h\""
  "src/data/bad.cpp:1: includes \"src/models/model.h\": src/data/ may include only"
  "src/models/bad.cpp:1: includes \"src/core/json.h\": src/models/ may include only"
  "src/train/bad.cpp:1: includes \"src/data/dataset.h\": src/train/ may include only"
  "src/dipaco/bad.cpp:1: includes <torch/torch.h>: src/dipaco/ may include only"
  "src/dipaco/run/bad.cpp:1: includes \"src/run/processes.h\": src/dipaco/run/ may include only"
  "src/core/bad.cpp:1: includes \"transport/zmq/zmq_group.h\": src/core/ may include only"
  "src/core/bad.cpp:2: includes \"src/run/hosts.h\""
  "src/sweep/bad.cpp:1: includes \"src/run/processes.h\": src/sweep/ may include only"
  "src/run/bad.cpp:1: includes \"src/sweep/plan.h\": src/run/ may include only"
  "src/cli/bad.cpp:1: includes <yaml-cpp/yaml.h>: src/cli/ may include only"
  "26 include(s) across layers")
foreach(line IN LISTS expected)
  string(FIND "${out}" "${line}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "missing from the checker's output: ${line}\n--- output:\n${out}")
  endif()
endforeach()
if(out MATCHES "ok[.]cpp")
  message(FATAL_ERROR "the checker refused an allowed include:\n${out}")
endif()
message(STATUS "layer check: all 26 violations reported")
