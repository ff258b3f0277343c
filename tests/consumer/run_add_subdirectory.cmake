# Configure, build and run a project that pulls qforge in with add_subdirectory().
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
endfunction()
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer/add_subdirectory -B ${WORK_DIR}
    -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX} -DQFORGE_SOURCE=${SOURCE_DIR})
run(${CMAKE_COMMAND} --build ${WORK_DIR})
run(${WORK_DIR}/consumer)
