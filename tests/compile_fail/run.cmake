# Compiles SOURCE with CXX (syntax only) and passes when the compiler refuses it with the
# message written on SOURCE's first line ("// expect: <text>"): the static_asserts and
# concepts of qforge's compile-time policies must fail loudly and say what is wrong.
file(STRINGS ${SOURCE} first LIMIT_COUNT 1)
string(REGEX REPLACE "^// expect: " "" expected "${first}")
execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only -I${INCLUDE} ${SOURCE}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but must be refused with: ${expected}")
endif()
string(FIND "${out}${err}" "${expected}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${SOURCE} was refused without the message '${expected}':\n${err}")
endif()
message(STATUS "${SOURCE}: refused with '${expected}'")
