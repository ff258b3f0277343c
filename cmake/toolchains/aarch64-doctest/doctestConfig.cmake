# doctest for cross builds: the same header-only library, without the host's /usr/include.
if(NOT TARGET doctest::doctest)
  add_library(doctest::doctest INTERFACE IMPORTED)
  set_target_properties(doctest::doctest PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${QFORGE_CROSS_DOCTEST_INCLUDE}")
endif()
set(doctest_FOUND TRUE)
