// qforge version: the one place it is defined. CMake and meson read it from here.
#pragma once

#define QFORGE_VERSION_MAJOR 0
#define QFORGE_VERSION_MINOR 1
#define QFORGE_VERSION_PATCH 0
#define QFORGE_VERSION_STRING "0.1.0"

namespace qforge {
inline constexpr int version_major = QFORGE_VERSION_MAJOR;
inline constexpr int version_minor = QFORGE_VERSION_MINOR;
inline constexpr int version_patch = QFORGE_VERSION_PATCH;
inline constexpr const char* version_string = QFORGE_VERSION_STRING;
}  // namespace qforge
