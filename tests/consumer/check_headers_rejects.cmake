# The header-structure check must fail on bad layering, naming each file and include: it runs
# check_headers.cmake over tests/consumer/layering_violations/ (one violation of each kind,
# beside includes that are allowed) and expects exactly these problems.
execute_process(COMMAND ${CMAKE_COMMAND} -DINCLUDE_DIR=${SOURCE_DIR}/tests/consumer/layering_violations
                        -P ${SOURCE_DIR}/tests/consumer/check_headers.cmake
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(text "${out}${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "check_headers.cmake accepted layering_violations/:\n${text}")
endif()
set(expected
  "qforge/core/a.hpp: #include \"qforge/simd/b.hpp\": core/ may include only core"
  "qforge/io/c.hpp: #include \"qforge/layout/d.hpp\": io/ may include only core io"
  "qforge/layout/d.hpp: #include \"qforge/simd/detail/e.hpp\": detail/ is private to simd/"
  "qforge/layout/d.hpp: #include \"qforge/simd/arch/f.hpp\": io/ and layout/ must not include simd/arch/"
  "qforge/convert/g.hpp: #include \"qforge/layout/gguf/detail/h.hpp\": detail/ is private to layout/")
foreach(e IN LISTS expected)
  string(FIND "${text}" "${e}" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "check_headers.cmake did not report\n  ${e}\nit said:\n${text}")
  endif()
endforeach()
# Nothing else: the allowed includes (simd -> core, simd -> its own detail/, convert -> io)
# must pass, so the report has exactly one line per expected problem.
string(REGEX MATCHALL "qforge/[a-z0-9_/]+\\.[hi]pp: " reported "${text}")
list(LENGTH reported n)
list(LENGTH expected m)
if(NOT n EQUAL m)
  message(FATAL_ERROR "check_headers.cmake reported ${n} problems, expected ${m}:\n${text}")
endif()
message(STATUS "check_headers.cmake refuses each kind of bad include")
