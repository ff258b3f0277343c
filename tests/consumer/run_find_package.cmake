# Install qforge into a scratch prefix, then configure, build and run a consumer of it.
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
endfunction()
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/qforge -G ${GENERATOR}
    -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix -DQFORGE_BUILD_TESTS=OFF
    -DQFORGE_BUILD_BENCH=OFF -DQFORGE_BUILD_EXAMPLES=OFF)
run(${CMAKE_COMMAND} --install ${WORK_DIR}/qforge)
if(NOT EXISTS ${WORK_DIR}/prefix/share/pkgconfig/qforge.pc)
  message(FATAL_ERROR "qforge.pc was not installed")
endif()
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer/find_package -B ${WORK_DIR}/consumer
    -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
run(${WORK_DIR}/consumer/consumer)
