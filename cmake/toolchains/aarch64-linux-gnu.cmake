# Cross build for AArch64 Linux with Debian's g++-aarch64-linux-gnu; tests run under qemu-user.
#   cmake -S . -B build-arm -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake \
#         -DQFORGE_TEST_LAYERS="core;quant;simd" -DQFORGE_BUILD_BENCH=OFF -DQFORGE_BUILD_EXAMPLES=OFF \
#         -DQFORGE_CONSUMER_TESTS=OFF
#   cmake --build build-arm && (cd build-arm && ctest)
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
# Header-only test dependencies (doctest) are found on the host; see the include fix below.
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/usr/aarch64-linux-gnu)

# doctest's imported target points at the host's /usr/include, which must not come before the
# cross compiler's own headers. Expose only /usr/include/doctest, through a private folder.
set(_qforge_doctest_shim "${CMAKE_BINARY_DIR}/_cross_include")
if(EXISTS /usr/include/doctest AND NOT EXISTS "${_qforge_doctest_shim}/doctest")
  file(MAKE_DIRECTORY "${_qforge_doctest_shim}")
  file(CREATE_LINK /usr/include/doctest "${_qforge_doctest_shim}/doctest" SYMBOLIC)
endif()
if(NOT TARGET doctest::doctest AND EXISTS "${_qforge_doctest_shim}/doctest")
  set(doctest_DIR "${CMAKE_CURRENT_LIST_DIR}/aarch64-doctest" CACHE PATH "doctest shim for cross builds")
  set(QFORGE_CROSS_DOCTEST_INCLUDE "${_qforge_doctest_shim}" CACHE PATH "doctest headers for cross builds")
endif()
