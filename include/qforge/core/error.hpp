// One exception hierarchy for everything qforge refuses or fails at.
//
// Every error carries the file, the tensor (empty when the problem is not about one) and the
// reason, and every message is built by one function so users and tests see one shape:
//   qforge: <file>: tensor '<tensor>': <reason>
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "qforge/core/config.hpp"

namespace qforge {

namespace detail {
QFORGE_DECL std::string format_error_message(std::string_view file, std::string_view tensor,
                                        std::string_view reason);
}  // namespace detail

/// Root of every exception qforge throws.
class error : public std::runtime_error {
public:
    error(std::string file, std::string tensor, std::string reason)
        : std::runtime_error(detail::format_error_message(file, tensor, reason)),
          file_(std::move(file)),
          tensor_(std::move(tensor)),
          reason_(std::move(reason)) {}

    const std::string& file() const noexcept { return file_; }
    const std::string& tensor() const noexcept { return tensor_; }
    const std::string& reason() const noexcept { return reason_; }

private:
    std::string file_;
    std::string tensor_;
    std::string reason_;
};

/// Input bytes that violate their format (a malformed header, a bad offset, bad JSON).
class format_error : public error {
    using error::error;
};

/// A shape, group size or bit width that does not fit what is asked of it.
class shape_error : public error {
    using error::error;
};

/// Valid input that a target format or loader cannot hold (refused on purpose).
class unsupported_error : public error {
    using error::error;
};

/// The operating system failed us (open, read, write, fsync, rename...).
class io_error : public error {
    using error::error;
};

/// Input that exceeds a configured resource limit (header size, element count...).
class limit_error : public error {
    using error::error;
};

/// The one funnel through which qforge raises: `fail<shape_error>(file, tensor, reason)`.
template <class Error = error>
[[noreturn]] inline void fail(std::string file, std::string tensor, std::string reason) {
    throw Error(std::move(file), std::move(tensor), std::move(reason));
}

}  // namespace qforge

#if QFORGE_BASE_BODIES_HERE

namespace qforge {
namespace detail {

QFORGE_DECL std::string format_error_message(std::string_view file, std::string_view tensor,
                                        std::string_view reason) {
    std::string msg = "qforge: ";
    if (!file.empty()) {
        msg.append(file);
        msg += ": ";
    }
    if (!tensor.empty()) {
        msg += "tensor '";
        msg.append(tensor);
        msg += "': ";
    }
    msg.append(reason);
    return msg;
}

}  // namespace detail
}  // namespace qforge
#endif
