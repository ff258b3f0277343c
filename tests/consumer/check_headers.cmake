# Structural checks over include/qforge (every .hpp and .ipp):
#  - the umbrella header qforge.hpp includes every public (non-detail) header, itself or through
#    base.hpp (the layers below convert/);
#  - every .hpp starts its body with #pragma once (an .ipp is included once per ISA on purpose);
#  - includes point down only. The layers, each allowed to include itself and what is listed:
#        core    -> (nothing)
#        simd    -> core
#        quant   -> core simd
#        layout  -> core simd quant
#        io      -> core
#        convert -> core simd quant layout io
#    The root headers (qforge.hpp, version.hpp) may include any layer.
#  - no header includes another layer's detail/ (at any depth: layout/gguf/detail/ is layout's);
#  - io/ and layout/ never include simd/arch/ (they reach kernels through simd's families).
# Every problem names the file, the line and the include.
#
# -DSOURCE_DIR=<repo> checks <repo>/include; -DINCLUDE_DIR=<dir> checks <dir> instead (the
# negative test, tests/consumer/check_headers_rejects.cmake, points it at bad headers).
cmake_minimum_required(VERSION 3.20)  # IN_LIST, string(JOIN) in script mode
if(NOT INCLUDE_DIR)
  set(INCLUDE_DIR ${SOURCE_DIR}/include)
endif()

set(allowed_core "core")
set(allowed_simd "core;simd")
set(allowed_quant "core;simd;quant")
set(allowed_layout "core;simd;quant;layout")
set(allowed_io "core;io")
set(allowed_convert "core;simd;quant;layout;io;convert")
set(layers core simd quant layout io convert)

file(GLOB_RECURSE headers RELATIVE ${INCLUDE_DIR} ${INCLUDE_DIR}/qforge/*.hpp ${INCLUDE_DIR}/qforge/*.ipp)
list(SORT headers)
file(READ ${INCLUDE_DIR}/qforge/qforge.hpp umbrella)
# The umbrella lists the converters' headers and includes base.hpp, which lists the lower layers'.
if(EXISTS ${INCLUDE_DIR}/qforge/base.hpp)
  file(READ ${INCLUDE_DIR}/qforge/base.hpp base)
  string(APPEND umbrella "${base}")
endif()
set(problems "")
foreach(h IN LISTS headers)
  file(READ ${INCLUDE_DIR}/${h} text)
  if(h MATCHES "\\.hpp$" AND NOT text MATCHES "#pragma once")
    string(APPEND problems "  ${h}: no #pragma once\n")
  endif()
  if(h MATCHES "\\.hpp$" AND NOT h MATCHES "/detail/" AND NOT h STREQUAL "qforge/qforge.hpp")
    string(FIND "${umbrella}" "#include \"${h}\"" pos)
    if(pos EQUAL -1)
      string(APPEND problems "  ${h}: missing from qforge/qforge.hpp\n")
    endif()
  endif()

  # The layer of this header: its first folder under qforge/, or "root".
  string(REGEX REPLACE "^qforge/([^/]+)/.*" "\\1" from "${h}")
  if(from STREQUAL h)
    set(from root)
  endif()

  file(STRINGS ${INCLUDE_DIR}/${h} lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"qforge/")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"(qforge/[^\"]+)\".*" "\\1" target "${line}")
    string(REGEX REPLACE "^qforge/([^/]+)/.*" "\\1" to "${target}")
    if(to STREQUAL target)
      set(to root)
    endif()
    set(where "  ${h}: #include \"${target}\"")
    if(from STREQUAL "root" AND to STREQUAL "root")
      # the umbrella and version.hpp
    elseif(to STREQUAL "root")
      if(NOT target STREQUAL "qforge/version.hpp")
        string(APPEND problems "${where}: only the umbrella includes every layer\n")
      endif()
    elseif(NOT to IN_LIST layers)
      string(APPEND problems "${where}: '${to}' is not a layer (core simd quant layout io convert)\n")
    elseif(NOT from STREQUAL "root")
      if(NOT from IN_LIST layers)
        string(APPEND problems "  ${h}: '${from}' is not a layer (core simd quant layout io convert)\n")
      elseif(NOT to IN_LIST allowed_${from})
        string(JOIN " " may ${allowed_${from}})
        string(APPEND problems "${where}: ${from}/ may include only ${may}; '${to}' is not below it\n")
      endif()
    endif()
    if(target MATCHES "/detail/" AND NOT from STREQUAL to)
      string(APPEND problems "${where}: detail/ is private to ${to}/; promote what ${from}/ needs to a public ${to}/ header\n")
    endif()
    if((from STREQUAL "io" OR from STREQUAL "layout") AND target MATCHES "^qforge/simd/arch/")
      string(APPEND problems "${where}: io/ and layout/ must not include simd/arch/ (use a kernel family)\n")
    endif()
  endforeach()
endforeach()
if(problems)
  message(FATAL_ERROR "header structure problems:\n${problems}")
endif()
list(LENGTH headers n)
message(STATUS "${n} headers checked")
