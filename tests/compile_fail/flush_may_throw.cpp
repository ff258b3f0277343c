// expect: flush_function
// A flush for io::early_writeback_with that may throw: it runs on the flusher thread, where
// nothing could catch it, so the concept refuses it by name.
#include "qforge/io/early_writeback.hpp"
struct throwing_flush {
    void operator()(int) const {}
};
qforge::io::early_writeback_with<throwing_flush> wb;
