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
  "13 include(s) across layers")
foreach(line IN LISTS expected)
  string(FIND "${out}" "${line}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "missing from the checker's output: ${line}\n--- output:\n${out}")
  endif()
endforeach()
if(out MATCHES "ok[.]cpp")
  message(FATAL_ERROR "the checker refused an allowed include:\n${out}")
endif()
message(STATUS "layer check: all 13 violations reported")
