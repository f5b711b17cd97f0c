# Checks that every #include respects the layers (README "Layout"): includes are repo-rooted
# ("transport/group.h"), so one include root serves every target and plain per-target include
# directories cannot refuse a wrong-layer include. This script does. It runs before the
# libraries compile (target atoll_layer_check, which every layer's library depends on, so a
# violation fails the build) and as the ctest `layer_check`.
#
#   cmake -DROOT=<repository root> -P cmake/check_layers.cmake
#
# Prints one line per violation, FILE:LINE: includes "X": LAYER may include only ...,
# and fails when there is any.
cmake_minimum_required(VERSION 3.22)

if(NOT ROOT)
  message(FATAL_ERROR "check_layers.cmake: pass -DROOT=<repository root>")
endif()

# layer(FOLDER ALLOWED FORBIDDEN EXPLAIN): the files under FOLDER may use repo-rooted "..."
# includes that match the regex ALLOWED, and no <...> include that matches FORBIDDEN ("" =
# any). A file belongs to the first layer declared whose folder contains it.
set(ATOLL_LAYERS "")
macro(layer folder allowed forbidden explain)
  list(APPEND ATOLL_LAYERS "${folder}")
  string(MAKE_C_IDENTIFIER "${folder}" id)
  set(allowed_${id} "${allowed}")
  set(forbidden_${id} "${forbidden}")
  set(explain_${id} "${explain}")
endmacro()

set(interfaces "transport/[^/]+[.]h")  # transport/group.h, control_plane.h, ...: the interfaces
layer(src/base "^src/base/" "" "src/base/")
layer(compression "^(compression|src/base)/" "" "compression/ and src/base/")
layer(transport/collectives "^(${interfaces}|transport/collectives/|compression/|src/base/)" "^(zmq|gloo/)"
      "the transport interfaces (transport/*.h), transport/collectives/, compression/ and src/base/, no zmq or gloo")
layer(transport/zmq "^(${interfaces}|transport/collectives/|transport/zmq/|compression/|src/base/)" "^gloo/"
      "the transport interfaces (transport/*.h), transport/collectives/, transport/zmq/, compression/ and src/base/, no gloo")
layer(transport/gloo "^(${interfaces}|transport/collectives/|transport/gloo/|compression/|src/base/)" "^zmq"
      "the transport interfaces (transport/*.h), transport/collectives/, transport/gloo/, compression/ and src/base/, no zmq")
layer(transport/relay "^(transport/relay|src/base)/" "^(ATen|torch|c10|zmq|gloo)[/.]"
      "transport/relay/ and src/base/, no libtorch, zmq or gloo")
layer(transport "^(${interfaces}|transport/collectives/|transport/inproc/|compression/|src/base/)" "^(zmq|gloo/)"
      "the transport interfaces (transport/*.h), transport/collectives/, transport/inproc/, compression/ and src/base/, no zmq or gloo")
layer(src/checkpoint "^src/(base|checkpoint)/" "^(ATen|torch|c10|zmq|gloo/|yaml-cpp/)"
      "src/checkpoint/ and src/base/, no libtorch, zmq, gloo or yaml-cpp")
layer(algorithms "^(algorithms/|${interfaces}|compression/|src/base/)" "^(zmq|gloo/|yaml-cpp/)"
      "algorithms/, the transport interfaces (transport/*.h), compression/ and src/base/, no zmq, gloo or yaml-cpp")
# The layers above: each src/ folder includes only the layers below it (the README's layout
# table, bottom to top); only src/run reaches the networked transports, only src/config
# yaml-cpp, and no layer under src/run zmq or gloo.
layer(src/config "^(src/(base|config)/|src/data/kinds[.]h|src/dipaco/config[.]h|algorithms/options[.]h|compression/stage[.]h|transport/kinds[.]h)" "^(ATen|torch|c10|zmq|gloo/)"
      "src/config/, src/base/, algorithms/options.h, compression/stage.h, transport/kinds.h, src/data/kinds.h and src/dipaco/config.h (the option, stage, transport and data-kind tables, the dipaco: section), no libtorch, zmq or gloo")
layer(src/data "^src/(base|config|data)/" "^(zmq|gloo/|yaml-cpp/)"
      "src/data/, src/config/ and src/base/, no zmq, gloo or yaml-cpp")
layer(src/models "^src/(base|config|data|models)/" "^(zmq|gloo/|yaml-cpp/)"
      "src/models/, src/data/, src/config/ and src/base/, no zmq, gloo or yaml-cpp")
layer(src/train "^src/(base|config|train)/" "^(zmq|gloo/|yaml-cpp/)"
      "src/train/, src/config/ and src/base/, no zmq, gloo or yaml-cpp")
# DiPaCo's run-level parts (compiled into atoll_core; the first layer whose folder holds a
# file owns it, so this one goes before src/dipaco's).
layer(src/dipaco/run
      "^(src/(base|checkpoint|config|core|data|dipaco|models|train)/|algorithms/|${interfaces}|compression/)"
      "^(zmq|gloo/|yaml-cpp/)"
      "src/dipaco/, the layers below src/run and src/core itself, algorithms/, compression/ and the transport interfaces, no zmq, gloo or yaml-cpp")
layer(src/dipaco "^src/(base|data|dipaco)/" "^(ATen|torch|c10|zmq|gloo/|yaml-cpp/)"
      "src/dipaco/, src/data/ and src/base/, no libtorch, zmq, gloo or yaml-cpp")
layer(src/core
      "^(src/(base|checkpoint|config|core|data|dipaco|models|train)/|algorithms/|${interfaces}|transport/inproc/|compression/)"
      "^(zmq|gloo/|yaml-cpp/)"
      "the layers below src/run (src/base, checkpoint, config, data, dipaco, models, train), algorithms/, compression/, the transport interfaces and transport/inproc/, no zmq, gloo or yaml-cpp")
layer(src/sweep "^src/(base|config|core|sweep)/" "^(zmq|gloo/|yaml-cpp/|ATen|torch|c10)"
      "src/sweep/, src/core/, src/config/ and src/base/, no libtorch, zmq, gloo or yaml-cpp")
layer(src/run "^(src/(base|checkpoint|config|core|data|dipaco|models|train|run)/|algorithms/|compression/|transport/)"
      "^yaml-cpp/" "every layer but src/sweep and src/cli, no yaml-cpp")
layer(src/cli "^(src/|algorithms/|compression/|transport/)" "^yaml-cpp/" "any layer, no yaml-cpp")

set(violations 0)
set(checked 0)
foreach(folder IN LISTS ATOLL_LAYERS)
  string(MAKE_C_IDENTIFIER "${folder}" id)
  file(GLOB_RECURSE files RELATIVE "${ROOT}" "${ROOT}/${folder}/*.h" "${ROOT}/${folder}/*.cpp")
  foreach(f IN LISTS files)
    set(owner "")
    foreach(other IN LISTS ATOLL_LAYERS)
      string(FIND "${f}" "${other}/" at)
      if(at EQUAL 0)
        set(owner "${other}")
        break()
      endif()
    endforeach()
    if(NOT owner STREQUAL folder)
      continue()  # e.g. transport/zmq/* is checked as transport/zmq, not as transport
    endif()
    math(EXPR checked "${checked} + 1")
    # One list element per line. CMake lists split on ";" and treat "[", "]" and "\\"
    # specially, so those are masked first (include lines never need them).
    file(READ "${ROOT}/${f}" text)
    string(REPLACE "\\" "<bs>" text "${text}")
    string(REPLACE ";" "<sc>" text "${text}")
    string(REPLACE "[" "<lb>" text "${text}")
    string(REPLACE "]" "<rb>" text "${text}")
    string(REPLACE "\n" ";" lines "${text}")
    set(lineno 0)
    foreach(line IN LISTS lines)
      math(EXPR lineno "${lineno} + 1")
      if(NOT line MATCHES "^[ \t]*#[ \t]*include")
        continue()
      endif()
      set(bad "")
      if(line MATCHES "#[ \t]*include[ \t]*\"([^\"]+)\"")
        set(header "${CMAKE_MATCH_1}")
        # A name without a folder ("quantize_internal.h") is the including file's neighbour.
        if(header MATCHES "/" AND NOT header MATCHES "${allowed_${id}}")
          set(bad "\"${header}\"")
        endif()
      elseif(line MATCHES "#[ \t]*include[ \t]*<([^>]+)>")
        set(header "${CMAKE_MATCH_1}")
        if(NOT forbidden_${id} STREQUAL "" AND header MATCHES "${forbidden_${id}}")
          set(bad "<${header}>")
        endif()
      endif()
      if(NOT bad STREQUAL "")
        message(NOTICE "${f}:${lineno}: includes ${bad}: ${folder}/ may include only ${explain_${id}}")
        math(EXPR violations "${violations} + 1")
      endif()
    endforeach()
  endforeach()
endforeach()

if(checked EQUAL 0)
  message(FATAL_ERROR "check_layers.cmake: no source files under ${ROOT}")
endif()
if(violations GREATER 0)
  message(FATAL_ERROR "${violations} include(s) across layers (cmake/check_layers.cmake)")
endif()
